/*
** dist.h — distributed sessions: workers, SPMD execution, collectives.
** Front ends call nbD_init() before creating VMs (registers the dist_* and
** collective builtins), and main dispatches `nabla worker` / `nabla run`.
**
** The folder, by job:
**   session   dsession.c (controller: workers, control socket, commands),
**             dsessionlib.c (its builtins), drun.c (`nabla run`)
**   worker    dworker.c (`nabla worker`: the VM thread and the I/O thread)
**   protocol  dproto.c (control messages, on the signing core wire/sign.c)
**   transport dring.c (TCP ring), dshm.c (shared memory), dnccl.c (NCCL),
**             dlaunch.c (ssh, srun)
**   tensors   dtensorcoll.c (collectives on tensors, autograd), dgroup.c
**             (sub-groups), dcompress.c, ddataparallel.c (the gradient
**             reducer), dcoll.c (the worker-side builtins), dzero.c
**   front     dmagic.c (the front ends' magics)
**   async     dasync.c (the session's futures: dist.submit), dmsg.c
**             (messages between workers: dist.post, recv_any, probe)
*/
#ifndef DIST_DIST_H
#define DIST_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include "lang/nabla.h"

void nbD_init(void);
int  nbD_worker_main(int argc, char **argv);   /* argv[0] == "worker" */
int  nbD_run_main(int argc, char **argv);      /* argv[0] == "run" */
int  nbD_join_main(int argc, char **argv);     /* argv[0] == "join": drdzv.c */

/* The `%%all` cell / `%all EXPR` magics of the front ends (REPL, kernel): the
** nabla source that runs `src` on every worker (pull=0) or shows the value of
** the expression on every worker (pull=1).  malloc'd. */
char *nbD_magic_code(const char *src, size_t len, int pull);

/* The magics of both front ends (dist/dmagic.c): when code (a REPL line or a
** cell) is %time, %timeit, %who, %help NAME / ?NAME / NAME?, %all, %%all,
** %reset or %load, runs it (output through the VM's sink; help text through
** help_cb when given, e.g. Jupyter's pager) and returns 1 with *status 0
** (ok), 1 (a nabla error is pending: report it as after nb_run) or 2 (a
** usage error, already written to stderr).  Returns 0 for ordinary code.
** echo: the nb_run flags for showing values (%time, %all). */
/* Whether code (a REPL line or a cell) is a `%%all` cell: after leading white
** space, "%%all" alone or followed by a space or a line break.  *body and
** *body_len (when not NULL) get the lines after the %%all line.  The one
** parser of the front ends: nbD_magic runs such a cell, the REPL collects one,
** the kernel groups its output by rank. */
bool nbD_all_cell(const char *code, size_t len, const char **body, size_t *body_len);
/* Whether code starts a cell magic (`%%all`, `%%profile`): the REPL collects
** the lines of such a cell until an empty line, then runs it with nbD_magic. */
bool nbD_cell_magic(const char *code, size_t len);
typedef void (*nbD_HelpFn)(void *ud, const char *text);
int nbD_magic(nb_VM *vm, const char *code, size_t len, int echo, int *status, nbD_HelpFn help_cb, void *ud);

#endif
