/*
** repl.c — the terminal REPL: GNU readline editing, persistent history in
** ~/.nabla_history, Tab completion, multi-line input while brackets or
** blocks are open (nb_is_complete, shared with the Jupyter kernel), echo of
** expression values, %commands, and Ctrl-C that stops running code.
*/
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <readline/readline.h>
#include <readline/history.h>
#include "util/dynload.h"
#include "repl/rldyn.h"   /* readline is loaded when interactive() starts */
#include "repl.h"
#include "dist/dist.h"

/* File-scope because their readers take no user pointer: the SIGINT handler
** and readline's completion callbacks.  One REPL per process. */
static nb_VM *active_vm;
static volatile sig_atomic_t running;     /* code is executing */
static volatile sig_atomic_t cancelled;   /* Ctrl-C while typing */

static int use_color(int fd) { return isatty(fd) && !getenv("NO_COLOR"); }

void repl_print_error(nb_VM *vm) {
  const nb_ErrorInfo *e = nb_last_error(vm);
  if (!e) return;
  int color = use_color(2);
  fprintf(stderr, "%s%s%s", color ? "\033[31m" : "", e->report, color ? "\033[0m" : "");
  fflush(stderr);
}

static void on_sigint(int sig) {
  (void)sig;
  if (running) { if (active_vm) nb_vm_interrupt(active_vm); return; }
  cancelled = 1;
  /* abandon the line being typed and show a fresh prompt */
  if (write(1, "\n", 1) < 0) {}
  if (!repl_rl.loaded) return;   /* piped stdin: no line editor */
  rl_on_new_line();
  rl_replace_line("", 0);
  rl_set_prompt(">>> ");
  rl_redisplay();
}

/* scripts and -e: no line is ever typed, so every Ctrl-C interrupts the code
** (it used to take the typing branch and the script went on) */
void repl_install_sigint_script(nb_VM *vm) {
  running = 1;
  repl_install_sigint(vm);
}

void repl_install_sigint(nb_VM *vm) {
  active_vm = vm;
  struct sigaction sa; memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, NULL);
}


static int run(nb_VM *vm, const char *src, const char *name, int flags) {
  running = 1;
  int st = nb_run(vm, src, strlen(src), name, flags);
  running = 0;
  fflush(stdout);
  if (st) repl_print_error(vm);
  return st;
}

/* ------------------------------------------------------------ completion */
static char **matches; static int nmatches, imatch;
static char *completion_gen(const char *text, int state) {
  (void)text;
  if (state == 0) imatch = 0;
  return imatch < nmatches ? strdup(matches[imatch++]) : NULL;
}
static char **attempt_completion(const char *text, int start, int end) {
  rl_attempted_completion_over = 1;
  nb_Completions c;
  nb_complete(active_vm, rl_line_buffer, end, &c);
  /* readline replaces line[start, end) (its word can include "rec." since '.'
  ** is not a word break); the items replace line[c.start, end): re-attach the
  ** part in between, or "params.wei" would become "weight_decay". */
  if (c.start > start) {
    size_t k = (size_t)(c.start - start);
    for (int i = 0; i < c.n; i++) {
      size_t n = strlen(c.items[i]);
      char *full = malloc(k + n + 1);
      if (!full) abort();
      memcpy(full, text, k); memcpy(full + k, c.items[i], n + 1);
      free(c.items[i]); c.items[i] = full;
    }
  }
  matches = c.items; nmatches = c.n;
  char **r = rl_completion_matches(text, completion_gen);
  nb_completions_free(&c);
  matches = NULL; nmatches = 0;
  return r;
}

/* ------------------------------------------------------------ %commands */
/* %quit ends the session (returns 1); every other %magic, ?name and name?
** is dist/dmagic.c's, shared with the Jupyter kernel. */
static int command(nb_VM *vm, const char *line, int *status) {
  if (!strcmp(line, "%quit") || !strncmp(line, "%quit ", 6)) return 1;
  int st = 0;
  running = 1;
  int handled = nbD_magic(vm, line, strlen(line), NB_ECHO, &st, NULL, NULL);
  running = 0;
  fflush(stdout);
  if (!handled) { fprintf(stderr, "not a command: %s (try %%help)\n", line); st = 2; }
  if (st == 1) repl_print_error(vm);
  *status = st != 0;
  return 0;
}

/* A cell magic (%%all, %%profile) is collected line by line, its first line
** included, until an empty line; dmagic.c runs it as the kernel's cells. */

/* ?name or name? on a line of its own */
static int help_query(const char *line) {
  size_t n = strcspn(line, "\r\n");
  while (n && (line[n - 1] == ' ' || line[n - 1] == '\t')) n--;
  const char *p = line; while (*p == ' ' || *p == '\t') p++;
  return n > 1 && (*p == '?' || line[n - 1] == '?');
}

/* ------------------------------------------------------------ modes */
/* Appends line[0..n) (and a newline when nl: readline's lines have none) to
** the entry being collected, *buf (NULL when empty), kept NUL-terminated. */
static void append(char **buf, size_t *blen, const char *line, size_t n, int nl) {
  char *b = realloc(*buf, *blen + n + 2);
  if (!b) abort();
  memcpy(b + *blen, line, n); *blen += n;
  if (nl) b[(*blen)++] = '\n';
  b[*blen] = 0;
  *buf = b;
}

static char *history_path(void) {
  const char *home = getenv("HOME");
  if (!home) return NULL;
  size_t n = strlen(home) + 32; char *p = malloc(n);
  if (p) snprintf(p, n, "%s/.nabla_history", home);
  return p;
}

/* ~/.nabla_history keeps the last HISTORY_ENTRIES entries, each at most
** HISTORY_ENTRY_MAX bytes: a longer one (a pasted blob, a 4 MB string
** literal) runs but is not remembered, so the file stays small; it is
** trimmed as the REPL starts. */
#define HISTORY_ENTRIES 10000
#define HISTORY_MARK '\001'   /* starts each entry's timestamp line in the file */
#define HISTORY_ENTRY_MAX (8 << 10)
static void remember(const char *entry, const char *hist) {
  if (!*entry || strlen(entry) > HISTORY_ENTRY_MAX) return;
  add_history(entry);
  if (hist) append_history(1, hist);
}

static int interactive(nb_VM *vm) {
  /* a library a program may need (SLEEF, libpng, ...) that is missing would
  ** end this session at its first use, with the user's work: refuse now, as a
  ** linked library would (a script or piped input still starts fast) */
  if (nb_dynlib_require_all()) return 127;
  repl_readline_load();
  char *hist = history_path();
  using_history();
  stifle_history(HISTORY_ENTRIES);
  /* Multi-line entries stay one item across sessions: every entry is written
  ** after a timestamp line, and readline reads a file that starts with one
  ** entry by entry (bash's lithist form).  The timestamp's mark is \001, not
  ** bash's '#': a line of an entry starting "#1" (a comment) would be taken
  ** for a timestamp and lost; \001 cannot be typed into a line. */
  history_comment_char = HISTORY_MARK;
  history_write_timestamps = 1;
  /* Read, then write back: the newest HISTORY_ENTRIES entries (stifled as
  ** read: a killed session never trimmed the file), each after its
  ** timestamp (a file from before, one line per entry, is converted), and
  ** the file exists for append_history.  Not history_truncate_file: it
  ** counts lines, and a cut inside an entry would start the file without a
  ** timestamp, which reads every line as an entry again. */
  if (hist) { read_history(hist); write_history(hist); }
  rl_readline_name = "nabla";
  rl_attempted_completion_function = attempt_completion;
  rl_basic_word_break_characters = " \t\n\"\\'`@$><=;|&{(,[+-*/%:";
  rl_catch_signals = 0;
  printf("nabla %s — type %%help for help, Ctrl-D to exit\n", nb_version());
  char *buf = NULL; size_t blen = 0;
  int status = 0, all_cell = 0;   /* collecting a cell magic (%%all, %%profile) until an empty line */
  for (;;) {
    cancelled = 0;
    char *line = readline(all_cell ? (nbD_all_cell(buf, blen, NULL, NULL) ? "all> " : "%%> ") : buf ? "... " : ">>> ");
    if (cancelled) { free(buf); buf = NULL; blen = 0; all_cell = 0; cancelled = 0; if (line && !*line) { free(line); continue; } }
    if (!line) { printf("\n"); break; }
    if (all_cell) {
      if (*line) {
        append(&buf, &blen, line, strlen(line), 1);
        free(line);
        continue;
      }
      free(line);
      all_cell = 0;
      if (buf) { command(vm, buf, &status); free(buf); buf = NULL; blen = 0; }
      continue;
    }
    if (!buf && nbD_cell_magic(line, strlen(line))) {
      remember(line, hist);
      all_cell = 1;
      append(&buf, &blen, line, strlen(line), 1);
      free(line);
      continue;
    }
    if (!buf && (line[0] == '%' || help_query(line))) {
      remember(line, hist);
      int quit = command(vm, line, &status);
      free(line);
      if (quit) break;
      continue;
    }
    append(&buf, &blen, line, strlen(line), 1);
    free(line);
    nb_Completeness c = nb_is_complete(buf, NULL);
    if (c == NB_INCOMPLETE) continue;
    /* history keeps the whole multi-line entry as one item */
    char *entry = strndup(buf, blen - 1);
    if (entry) remember(entry, hist);
    free(entry);
    status = run(vm, buf, "<input>", NB_ECHO);
    free(buf); buf = NULL; blen = 0;
  }
  free(buf);
  free(hist);
  return 0;
}

/* stdin is a pipe: the same statement-at-a-time loop, no prompts */
static int piped(nb_VM *vm) {
  char *line = NULL; size_t cap = 0; ssize_t n;
  char *buf = NULL; size_t blen = 0;
  int failed = 0, status = 0, all_cell = 0;
  for (;;) {
    n = getline(&line, &cap, stdin);
    if (all_cell) {   /* a %%all cell ends at an empty line or at the end of input */
      if (n > 0 && line[0] != '\n') {
        append(&buf, &blen, line, (size_t)n, 0);
        continue;
      }
      all_cell = 0;
      if (buf) { command(vm, buf, &status); if (status) failed = 1; free(buf); buf = NULL; blen = 0; }
      if (n < 0) break;
      continue;
    }
    if (n >= 0) {
      if (!buf && nbD_cell_magic(line, (size_t)n)) { all_cell = 1; append(&buf, &blen, line, (size_t)n, 0); continue; }
      if (!buf && (line[0] == '%' || help_query(line))) {
        line[strcspn(line, "\r\n")] = 0;   /* as readline gives it: no newline */
        if (command(vm, line, &status)) break;
        if (status) failed = 1;
        continue;
      }
      append(&buf, &blen, line, (size_t)n, 0);
      if (nb_is_complete(buf, NULL) == NB_INCOMPLETE) continue;
    }
    if (buf) {
      if (run(vm, buf, "<stdin>", NB_ECHO)) failed = 1;
      free(buf); buf = NULL; blen = 0;
    }
    if (n < 0) break;
  }
  free(line); free(buf);
  return failed;
}

int repl_main(nb_VM *vm) {
  repl_install_sigint(vm);
  return isatty(0) ? interactive(vm) : piped(vm);
}
