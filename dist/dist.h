/*
** dist.h — distributed sessions: workers, SPMD execution, collectives.
** Front ends call nbD_init() before creating VMs (registers the dist_* and
** collective builtins), and main dispatches `nabla worker` / `nabla run`.
*/
#ifndef DIST_DIST_H
#define DIST_DIST_H

void nbD_init(void);
int  nbD_worker_main(int argc, char **argv);   /* argv[0] == "worker" */
int  nbD_run_main(int argc, char **argv);      /* argv[0] == "run" */

/* The `%%all` cell / `%all EXPR` magics of the front ends (REPL, kernel): the
** nabla source that runs `src` on every worker (pull=0) or shows the value of
** the expression on every worker (pull=1).  malloc'd. */
char *nbD_magic_code(const char *src, size_t len, int pull);

#endif
