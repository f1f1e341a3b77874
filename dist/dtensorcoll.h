/* dtensorcoll.h — tensor collectives (dtensorcoll.c); errors via nt_error_msg() */
#ifndef DIST_DTENSORCOLL_H
#define DIST_DTENSORCOLL_H
#include "dist/dinternal.h"

enum { NBD_SUM, NBD_AVG, NBD_MAX, NBD_MIN };
nt_Tensor *nbD_all_reduce(nt_Tensor *x, int op);
nt_Tensor *nbD_all_gather(nt_Tensor *x);
nt_Tensor *nbD_reduce_scatter(nt_Tensor *x, int op);
nt_Tensor *nbD_broadcast(nt_Tensor *x, int src);      /* x may be NULL off the source */
int        nbD_broadcast_(nt_Tensor *x, int src);     /* in place */
int        nbD_send(nt_Tensor *x, int dst);
nt_Tensor *nbD_recv(int src);
int        nbD_all_to_all(nt_Tensor **xs, nt_Tensor **out);
int        nbD_all_reduce_coalesced(nt_Tensor **xs, int n, int op, size_t bucket_bytes, nt_Tensor **out);
int        nbD_isend(nt_Tensor *x, int dst);            /* a handle id, or -1 */
int        nbD_isend_wait(int id, unsigned seq);
unsigned   nbD_isend_seq(int id);
int        nbD_isend_test(int id, unsigned seq);        /* 1 finished (wait returns at once), 0 still sending, -1 no such handle */
int        nbD_recv_ready(int src);                     /* 1 a message from src has begun to arrive, 0 not yet, -1 error set */
void       nbD_async_drain(void);                     /* every running isend has finished */
void       nbD_split_rows(int64_t n, int w, int64_t *rows);
#endif
