/*
** main.c — the `nabla` executable: REPL, scripts, -e, and the subcommands
** (kernel, worker, run) that later front ends add.
*/
#include <libgen.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "lang/nabla.h"
#include "repl/repl.h"
#include "dist/dist.h"
#include "kernel/kernel.h"

static const char usage[] =
  "usage: nabla                     start the interactive REPL (reads a program from stdin when piped)\n"
  "       nabla FILE.nbl [ARGS...]  run a script (argv holds FILE and ARGS)\n"
  "       nabla -e CODE             run CODE\n"
  "       nabla run -n N FILE.nbl   run a script on N local workers (SPMD; rank 0 prints)\n"
  "       nabla kernel -f FILE      serve a Jupyter kernel (nabla kernel install: register it)\n"
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

/* OpenMP threads must not spin while they wait.  libgomp's default is to
** busy-wait ~300k iterations (milliseconds) after every parallel region; a
** training step runs hundreds of regions (BLAS calls and our loops), so an
** idle worker keeps a core busy all the time.  On a machine with other load
** the spinning thread takes the CPU the main thread or a preempted team mate
** needs and every barrier waits a time slice: 5-10x slower steps on 2 cores.
** libgomp reads OMP_WAIT_POLICY once, in its constructor, before main (and
** setenv from a preinit function is undone when libc's own init resets
** environ), so instead the executable interposes getenv: ELF resolves
** libgomp's getenv call to this definition, which answers 3000 for
** GOMP_SPINCOUNT unless the user set OMP_WAIT_POLICY or GOMP_SPINCOUNT,
** and only until main starts (so scripts' getenv sees the real environment).
** Everything else is the plain environment lookup (libc's own calls do not
** come here).  This replaces a re-exec with the variable set, which cost a
** second process start (~5 ms).  3000 spins (tens of microseconds) before
** sleeping: fully passive (0) made back-to-back regions pay a futex wake-up
** each, 15% slower MLP steps on an idle machine, while 3000 measured the same
** as passive on the busy one and as libgomp's default on the idle one. */
extern char **environ;
static char *env_lookup(const char *name) {
  size_t n = strlen(name);
  for (char **e = environ; e && *e; e++)
    if (!strncmp(*e, name, n) && (*e)[n] == '=') return *e + n + 1;
  return NULL;
}
static bool main_started;
char *getenv(const char *name) {
  char *v = env_lookup(name);
  if (!v && !main_started && !strcmp(name, "GOMP_SPINCOUNT") && !env_lookup("OMP_WAIT_POLICY")) v = (char *)"3000";
  return v;
}

int main(int argc, char **argv) {
  main_started = true;
  find_stdlib();
  if (argc > 1 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V"))) { printf("nabla %s\n", nb_version()); return 0; }
  if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) { fputs(usage, stdout); return 0; }
  nbD_init();
  if (argc > 1 && !strcmp(argv[1], "kernel")) return kernel_main(argc - 1, argv + 1);
  if (argc > 1 && !strcmp(argv[1], "worker")) return nbD_worker_main(argc - 1, argv + 1);
  if (argc > 1 && !strcmp(argv[1], "run")) return nbD_run_main(argc - 1, argv + 1);
  nb_VM *vm = nb_vm_new(nb_stdio_sink());
  int st;
  if (argc > 1 && !strcmp(argv[1], "-e")) {
    if (argc < 3) { fputs(usage, stderr); nb_vm_free(vm); return 2; }
    nb_vm_set_argv(vm, argc - 3, argv + 3);
    repl_install_sigint_script(vm);
    st = nb_run(vm, argv[2], strlen(argv[2]), "<-e>", 0) ? 1 : 0;
    fflush(stdout);
    if (st) repl_print_error(vm);
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
