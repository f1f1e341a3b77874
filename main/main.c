/*
** main.c — the `nabla` executable's entry: finds the stdlib, then dispatches
** on argv to a front end — the REPL, a script, -e CODE (repl/), `nabla
** kernel` (kernel/), `nabla worker` / `nabla run` (dist/).
**
** It lives in its own folder, outside libnabla, because it is the one place
** that depends on every front end: repl/ and kernel/ do not include each
** other, and the tests link libnabla without any entry point.
*/
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "lang/nabla.h"
#include "repl/repl.h"
#include "dist/dist.h"
#include "kernel/kernel.h"
#include "main/omp_wait.h"

static const char usage[] =
  "usage: nabla                     start the interactive REPL (reads a program from stdin when piped)\n"
  "       nabla FILE.nbl [ARGS...]  run a script (argv holds FILE and ARGS)\n"
  "       nabla -e CODE             run CODE\n"
  "       nabla -u ...              standard output unbuffered (also NABLA_UNBUFFERED=1), e.g. for a log file\n"
  "       nabla run -n N FILE.nbl   run a script on N local workers (SPMD; rank 0 prints)\n"
  "       nabla join HOST:PORT --key FILE   ask a running job (nabla run --rdzv) to take this host\n"
  "       nabla kernel -f FILE      serve a Jupyter kernel (nabla kernel install: register it)\n"
  "       nabla --dis FILE.nbl      print the bytecode of FILE's statements and functions\n"
  "       nabla --version | --help\n";

/* The stdlib: $NABLA_STDLIB, else the source tree's (a build-tree binary),
** else <prefix>/share/nabla/stdlib next to an installed binary. */
static void find_stdlib(void) {
  const char *env = getenv("NABLA_STDLIB");
  if (env) { nb_set_stdlib_dir(env); return; }
#ifdef NABLA_STDLIB_DIR
  if (access(NABLA_STDLIB_DIR, R_OK) == 0) { nb_set_stdlib_dir(NABLA_STDLIB_DIR); return; }
#endif
  char exe[PATH_MAX]; ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = 0;
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/../share/nabla/stdlib", dirname(exe));
    nb_set_stdlib_dir(path);
  }
}

static int run_script(nb_VM *vm, const char *path, int argc, char **argv) {
  nb_vm_set_argv(vm, argc, argv);
  char *copy = strdup(path);
  nb_vm_add_path(vm, dirname(copy));
  free(copy);
  repl_install_sigint_script(vm);
  int st = nb_run_file(vm, path);
  fflush(stdout);
  if (st) repl_print_error(vm);
  return st ? 1 : 0;
}

/* Standard output is line-buffered on a terminal and block-buffered to a
** file or pipe (C's default): a script's log under nohup would show nothing
** for a minute.  -u (Python's flag) or NABLA_UNBUFFERED=1 (as
** PYTHONUNBUFFERED) write every print at once; flush() does it on demand.
** The variable reaches the workers of `nabla run` too. */
static void unbuffered_stdout(int *argc, char ***argv) {
  const char *env = getenv("NABLA_UNBUFFERED");
  int on = env && *env && strcmp(env, "0");
  if (*argc > 1 && !strcmp((*argv)[1], "-u")) {
    on = 1;
    setenv("NABLA_UNBUFFERED", "1", 1);   /* and for the processes it starts (nabla run's workers) */
    (*argv)[1] = (*argv)[0];   /* drop the flag: the rest parses as without it */
    (*argv)++; (*argc)--;
  }
  if (on) setvbuf(stdout, NULL, _IONBF, 0);
}

int main(int argc, char **argv) {
  nabla_omp_wait_main_started();   /* libgomp has read its settings (omp_wait.c) */
  unbuffered_stdout(&argc, &argv);
  find_stdlib();
  if (argc > 1 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V"))) { printf("nabla %s\n", nb_version()); return 0; }
  if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) { fputs(usage, stdout); return 0; }
  const char *engine = getenv("NABLA_ENGINE");
  if (engine && *engine && strcmp(engine, "vm")) {
    /* issue 19 removed the tree walker: one engine, the bytecode VM */
    fprintf(stderr, "nabla: NABLA_ENGINE=%s: there is no such engine any more; the bytecode VM runs everything (unset NABLA_ENGINE)\n", engine);
    return 2;
  }
  nbD_init();
  if (argc > 1 && !strcmp(argv[1], "kernel")) return kernel_main(argc - 1, argv + 1);
  if (argc > 1 && !strcmp(argv[1], "worker")) return nbD_worker_main(argc - 1, argv + 1);
  if (argc > 1 && !strcmp(argv[1], "run")) return nbD_run_main(argc - 1, argv + 1);
  if (argc > 1 && !strcmp(argv[1], "join")) return nbD_join_main(argc - 1, argv + 1);
  nb_VM *vm = nb_vm_new(nb_stdio_sink());
  int st;
  if (argc > 1 && !strcmp(argv[1], "-e")) {
    if (argc < 3) { fputs(usage, stderr); nb_vm_free(vm); return 2; }
    nb_vm_set_argv(vm, argc - 3, argv + 3);
    repl_install_sigint_script(vm);
    st = nb_run(vm, argv[2], strlen(argv[2]), "<-e>", 0) ? 1 : 0;
    fflush(stdout);
    if (st) repl_print_error(vm);
  } else if (argc > 1 && !strcmp(argv[1], "--dis")) {
    /* the compiler's output for a file, without running it (lang/ldis.c) */
    size_t len = 0;
    char *src = NULL;
    FILE *fp = argc > 2 ? fopen(argv[2], "rb") : NULL;
    if (fp) {
      size_t cap = 1 << 16, n;
      src = malloc(cap);
      while (src && (n = fread(src + len, 1, cap - len, fp)) > 0) { len += n; if (len == cap) src = realloc(src, cap *= 2); }
      fclose(fp);
    }
    if (!src) { fprintf(stderr, "nabla --dis: cannot read %s\n", argc > 2 ? argv[2] : "(no file given)"); st = 2; }
    else {
      char *text = nb_disassemble(vm, src, len, argv[2]);
      if (text) { fputs(text, stdout); free(text); st = 0; }
      else { repl_print_error(vm); st = 1; }
      free(src);
    }
  } else if (argc > 1 && argv[1][0] == '-' && argv[1][1]) {
    fprintf(stderr, "nabla: unknown option %s\n%s", argv[1], usage);
    st = 2;
  } else if (argc > 1) {
    st = run_script(vm, argv[1], argc - 1, argv + 1);
  } else {
    st = repl_main(vm);
  }
  nb_vm_free(vm);
  return st;
}
