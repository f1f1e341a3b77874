/*
** rldyn.c — GNU readline, loaded when the terminal REPL starts (util/dynload.h).
**
** Only the interactive REPL edits lines, yet linking libreadline (and its
** libtinfo) cost every process at start, ~1,600 relocations
** (bench/results/2026-11-26-startup.md).  Unlike the other shims, every
** entry point is resolved at once by repl_readline_load(): the SIGINT
** handler calls rl_on_new_line & co., and resolving a symbol (dlsym) is not
** async-signal-safe.  Add an entry point to RL_FUNCS when repl.c starts
** calling a new one (the link fails until then).
*/
#include <stdio.h>
#include <readline/readline.h>
#include <readline/history.h>
#include "util/dynload.h"
#include "repl/rldyn.h"

#ifndef NABLA_READLINE_LIB
#define NABLA_READLINE_LIB "libreadline.so.8"
#endif

NB_DYNLIB_UNLISTED(readline_lib, NABLA_READLINE_LIB, "GNU readline (Debian package libreadline8), used by the terminal REPL")

#define RL_FUNCS(X) \
  X(readline) X(add_history) X(append_history) X(read_history) X(write_history) \
  X(using_history) X(stifle_history) X(rl_completion_matches) X(rl_on_new_line) X(rl_replace_line) \
  X(rl_set_prompt) X(rl_redisplay)

static struct {
#define FIELD(NAME) __typeof__(NAME) *NAME;
  RL_FUNCS(FIELD)
#undef FIELD
} fn;
ReplRlVars repl_rl;

void repl_readline_load(void) {
  if (repl_rl.loaded) return;
#define RESOLVE(NAME) fn.NAME = (__typeof__(NAME) *)nb_dynsym(&readline_lib, #NAME);
  RL_FUNCS(RESOLVE)
#undef RESOLVE
  repl_rl.line_buffer = nb_dynsym(&readline_lib, "rl_line_buffer");
  repl_rl.attempted_completion_over = nb_dynsym(&readline_lib, "rl_attempted_completion_over");
  repl_rl.catch_signals = nb_dynsym(&readline_lib, "rl_catch_signals");
  repl_rl.readline_name = nb_dynsym(&readline_lib, "rl_readline_name");
  repl_rl.basic_word_break_characters = nb_dynsym(&readline_lib, "rl_basic_word_break_characters");
  repl_rl.attempted_completion_function = nb_dynsym(&readline_lib, "rl_attempted_completion_function");
  repl_rl.comment_char = nb_dynsym(&readline_lib, "history_comment_char");
  repl_rl.write_timestamps = nb_dynsym(&readline_lib, "history_write_timestamps");
  repl_rl.loaded = 1;
}

/* the entry points: valid after repl_readline_load() */
char *readline(const char *prompt) { return fn.readline(prompt); }
void add_history(const char *line) { fn.add_history(line); }
int append_history(int n, const char *path) { return fn.append_history(n, path); }
int read_history(const char *path) { return fn.read_history(path); }
int write_history(const char *path) { return fn.write_history(path); }
void using_history(void) { fn.using_history(); }
void stifle_history(int n) { fn.stifle_history(n); }
char **rl_completion_matches(const char *text, rl_compentry_func_t *gen) { return fn.rl_completion_matches(text, gen); }
int rl_on_new_line(void) { return fn.rl_on_new_line(); }
void rl_replace_line(const char *text, int clear_undo) { fn.rl_replace_line(text, clear_undo); }
int rl_set_prompt(const char *prompt) { return fn.rl_set_prompt(prompt); }
void rl_redisplay(void) { fn.rl_redisplay(); }
