/*
** drdzv.h — the rendezvous of `nabla run --rdzv [HOST:]PORT --rdzv-key
** FILE`: hosts not named in --hosts ask to join the job (`nabla join
** HOST:PORT --key FILE`), authenticated exactly as workers are (ZeroMQ
** CURVE keys derived from the job's key, every message signed with it:
** nothing is read from a peer without the key); the job admits them at its
** next checkpoint, within --max-workers (dsess_request_regroup).
*/
#ifndef DIST_DRDZV_H
#define DIST_DRDZV_H

#include <pthread.h>
#include "dist/dproto.h"

#define DZ_MAX_JOINS 64          /* hosts one run admits through the rendezvous */
#define DZ_MAX_NAME 63           /* a joiner's host name: [A-Za-z0-9.-], at most this long */

typedef struct dz_Rdzv {
  void *ctx, *sock;
  pthread_t th; int on; volatile int stop;
  unsigned char key[DP_KEYLEN];
  pthread_mutex_t mu;
  char *known[1024 + DZ_MAX_JOINS]; int nknown;   /* --hosts and the hosts admitted: a second join is answered, not added */
  char *pending[DZ_MAX_JOINS]; int npending;      /* admitted, not yet taken by the next plan */
  int room;                                       /* hosts that can still join (--max-workers / slots, less the known ones) */
  uint64_t ctr;
} dz_Rdzv;

/* reads the job's key from FILE (64 hex digits), creating it (0600, a
** fresh random key) when create and it does not exist; 0, or -1 with why */
int  dz_key_file(const char *path, int create, unsigned char key[DP_KEYLEN], char *why, size_t n);
/* binds the rendezvous ("PORT" or "HOST:PORT"; HOST "*" or empty: every
** address) and starts its thread; hosts: those of --hosts; room: how many
** more hosts the job can take.  0, or -1 with why */
int  dz_open(dz_Rdzv *z, const char *where, const unsigned char key[DP_KEYLEN], char *const *hosts, int nhosts, int room,
             char *why, size_t n);
/* the hosts admitted since the last call (malloc'd strings into *out, at most max) */
int  dz_take(dz_Rdzv *z, char **out, int max);
void dz_close(dz_Rdzv *z);

/* `nabla join HOST:PORT --key FILE [--name NAME] [--timeout SECONDS]` */
int  nbD_join_main(int argc, char **argv);

#endif
