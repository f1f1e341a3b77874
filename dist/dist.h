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

#endif
