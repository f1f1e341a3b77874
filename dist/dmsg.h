/*
** dmsg.h — asynchronous messages between workers (dmsg.c): any value, to
** any rank, received from any rank, on a ZeroMQ inbox per worker beside the
** ring, secured as the control connection is (CURVE + signed messages).
*/
#ifndef DIST_DMSG_H
#define DIST_DMSG_H
#include "dist/dring.h"
#include "dist/dproto.h"

/* at worker start: binds the inbox on bind (the ring's interface), advertised
** as adv.  0, or -1 with err */
int  dm_open(void *ctx, const unsigned char key[DP_KEYLEN], int rank, int world, const char *bind, const char *adv, char *err, size_t n);
/* when the mesh forms (every rank at the same point): every rank's inbox
** address, over the ring.  0, or -1 (g->err) */
int  dm_exchange(dr_Group *g);
void dm_close(void);
void dm_init(void);   /* registers the dist_msg_* builtins */

#endif
