/*
** rldyn.h — GNU readline, loaded when the terminal REPL starts (rldyn.c):
** include after <readline/readline.h>; readline's variables then name the
** library's own through pointers that repl_readline_load() resolves.
*/
#ifndef REPL_RLDYN_H
#define REPL_RLDYN_H
#include <signal.h>
#include <readline/readline.h>

typedef struct ReplRlVars {
  volatile sig_atomic_t loaded;   /* set last: the SIGINT handler tests it */
  char **line_buffer;
  int *attempted_completion_over, *catch_signals;
  const char **readline_name;
  char **basic_word_break_characters;
  rl_completion_func_t **attempted_completion_function;
  char *comment_char;              /* history_comment_char, history_write_timestamps: multi-line entries (repl.c) */
  int *write_timestamps;
} ReplRlVars;
extern ReplRlVars repl_rl;

/* Loads readline and resolves every entry point the REPL uses (so that the
** SIGINT handler's rl_* calls never resolve anything); exits with "cannot
** load libreadline..." when it is missing.  Call before anything else of
** readline's. */
void repl_readline_load(void);

#define rl_line_buffer (*repl_rl.line_buffer)
#define rl_attempted_completion_over (*repl_rl.attempted_completion_over)
#define rl_catch_signals (*repl_rl.catch_signals)
#define rl_readline_name (*repl_rl.readline_name)
#define rl_basic_word_break_characters (*repl_rl.basic_word_break_characters)
#define rl_attempted_completion_function (*repl_rl.attempted_completion_function)
#define history_comment_char (*repl_rl.comment_char)
#define history_write_timestamps (*repl_rl.write_timestamps)
#endif
