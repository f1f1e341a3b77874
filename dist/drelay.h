/*
** drelay.h — the session's output relay (drelay.c): workers' output as
** whole lines prefixed with their rank, --log-dir files, launcher output.
** Part of the session controller: every function is called with the
** session's lock held (dsession.c).  vm: the VM to write through (its
** sink), or NULL for this process's stdout/stderr.
*/
#ifndef DRELAY_H
#define DRELAY_H
#include <stddef.h>
#include "lang/nbapi.h"

/* the longest line a rank keeps pending: a longer one goes out in pieces,
** the ones after the first prefixed "[rank N]+ " */
#define DSESS_LINE_MAX ((size_t)64 << 10)

int  dsess_relay_open(int n);                 /* -1: out of memory */
void dsess_relay_close(nb_VM *vm);            /* flushes the partial lines, frees */
/* nabla run: 1 rank 0's stdout unprefixed and the others' dropped, 2 every
** rank's prefixed (0: a session); log_fds: each rank's log (-1 none) or NULL */
void dsess_relay_mode(int run_mode, const int *log_fds);
/* what rank printed on stream (NB_STDOUT/NB_STDERR) */
void dsess_relay_output(nb_VM *vm, int rank, int stream, const char *data, size_t len);
/* what rank's launcher (its ssh; rank -1: srun) wrote on its stdout/stderr */
void dsess_relay_launcher(nb_VM *vm, int rank, int stream, const char *data, size_t len);
/* sends rank's partial lines (-1: every rank's) as pieces */
void dsess_relay_flush(nb_VM *vm, int rank);
/* an error report of rank, on stderr, on lines of its own */
void dsess_relay_report(nb_VM *vm, int rank, const char *text);
#endif
