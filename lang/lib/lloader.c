/*
** lib/lloader.c — the C side of data.loader (stdlib/data.nbl): background
** worker processes, the seeded permutation, and pinned asynchronous copies.
**
** Why processes, not threads: a VM and its values belong to the thread that
** runs it (lang/lvm.h's thread rule), and the batch function is a closure of
** the user's VM (its captures, its module's globals, the dataset tensors).
** A second VM on another thread would have none of them.  A forked child has
** all of them, copy-on-write, and runs the closure as the parent would:
**
**   parent (the training loop)                 worker w (a fork)
**   loader_pool_submit(h, k, arg) ── task ──▶  fn(arg) → value
**        k goes to worker k % W                serialized (nbZ_serialize)
**                                              into a memfd (shared memory)
**   loader_pool_take(h, k)  ◀── k, status, fd ─ (SCM_RIGHTS: the fd travels,
**        mmap, nbZ_deserialize                  the bytes do not)
**
** Each worker runs its tasks in order, so the next message from worker k % W
** is batch k: results come back in submission order whatever the number of
** workers, and a message for another batch is a loud error.  A result is in
** shared memory the moment the worker sends it, so a worker never blocks on
** a busy parent: the parent's step overlaps the workers' work, bounded by
** what data.nbl submits ahead (workers * prefetch).  loader_pool_ready counts
** the results that have arrived (the overlap, observable without timing).
**
** Errors: a failing fn sends its full report (message, location, stack) and
** the parent raises it naming the worker and the batch.  A worker that dies
** (killed, a crash) is reported with its signal or exit code.  Ctrl-C: the
** workers ignore SIGINT (the terminal sends it to the whole group); the
** parent's wait polls its VM's interrupt flag every 50 ms, kills and reaps
** every worker, and raises Interrupted.  A worker whose parent dies gets
** SIGKILL (PR_SET_PDEATHSIG), and one whose task socket closes exits: no
** orphans.  Workers must not use CUDA (a forked CUDA context is unusable):
** the batch function makes CPU tensors; loader_to_device moves them.
** OpenMP: a worker runs its tensor kernels on one thread (libgomp's pool does
** not survive fork, and W workers already use W cores).  Output: a worker
** prints to the process's stdout/stderr (the stdio sink), never through the
** parent's sink (a Jupyter kernel's sockets belong to the parent).
*/
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include "ltensor.h"
#include "lang/lib/nblib.h"
#include "tensor/tbackend.h"
#include "tensor/textend.h"

#define MAX_WORKERS 64
#define MAX_MSG_BYTES ((size_t)1 << 34)   /* 16 GiB: one batch's serialized size */

/* ------------------------------------------------------------ messages */
typedef struct TaskHdr { uint64_t k, len; } TaskHdr;                      /* + len bytes */
typedef struct ResHdr { uint64_t k, len; uint32_t status, pad; } ResHdr;  /* + an fd of len bytes */
enum { RES_OK = 0, RES_ERR = 1 };

static int write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    ssize_t w = write(fd, c, n);
    if (w < 0) { if (errno == EINTR) continue; return -1; }
    c += w; n -= (size_t)w;
  }
  return 0;
}
static int read_all(int fd, void *p, size_t n) {   /* 0, or -1 (EOF or error) */
  char *c = p;
  while (n) {
    ssize_t r = read(fd, c, n);
    if (r < 0) { if (errno == EINTR) continue; return -1; }
    if (r == 0) return -1;
    c += r; n -= (size_t)r;
  }
  return 0;
}

/* the result header with its memfd attached */
static int send_result(int sock, const ResHdr *h, int fd) {
  struct iovec iov = { (void *)h, sizeof *h };
  char ctl[CMSG_SPACE(sizeof(int))];
  memset(ctl, 0, sizeof ctl);
  struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl };
  struct cmsghdr *c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET; c->cmsg_type = SCM_RIGHTS; c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof fd);
  for (;;) {
    ssize_t w = sendmsg(sock, &m, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    return w == (ssize_t)sizeof *h ? 0 : -1;
  }
}
/* 1 with a header and its fd, 0 when nothing is waiting (nonblocking), -1 on EOF/error */
static int recv_result(int sock, ResHdr *h, int *fd, bool block) {
  struct iovec iov = { h, sizeof *h };
  char ctl[CMSG_SPACE(sizeof(int))];
  struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl };
  ssize_t r;
  do r = recvmsg(sock, &m, MSG_CMSG_CLOEXEC | (block ? 0 : MSG_DONTWAIT)); while (r < 0 && errno == EINTR);
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
  if (r != (ssize_t)sizeof *h) return -1;   /* stream socket: headers are written whole, fds ride on them */
  struct cmsghdr *c = CMSG_FIRSTHDR(&m);
  if (!c || c->cmsg_type != SCM_RIGHTS) return -1;
  memcpy(fd, CMSG_DATA(c), sizeof *fd);
  return 1;
}

/* ------------------------------------------------------------ the pool */
typedef struct Res { ResHdr h; int fd; } Res;
typedef struct Worker {
  pid_t pid; int sock;
  Res *q; int qn, qcap, qhead;      /* results received, not yet taken (FIFO) */
  uint64_t sent, taken;             /* tasks sent to / results taken from this worker */
} Worker;
typedef struct Pool {
  int n; Worker w[MAX_WORKERS];
  uint64_t next_submit, next_take;  /* batches are submitted and taken in order 0, 1, ... */
  bool closed;
} Pool;

static void pool_close(Pool *p) {
  if (p->closed) return;
  p->closed = true;
  for (int i = 0; i < p->n; i++) {
    Worker *w = &p->w[i];
    if (w->sock >= 0) close(w->sock);
    w->sock = -1;
    for (int j = 0; j < w->qn; j++) close(w->q[(w->qhead + j) % w->qcap].fd);
    free(w->q); w->q = NULL; w->qn = 0;
    if (w->pid > 0) {
      kill(w->pid, SIGKILL);
      while (waitpid(w->pid, NULL, 0) < 0 && errno == EINTR) {}
      w->pid = 0;
    }
  }
}
static void pool_free(void *ptr) { pool_close(ptr); free(ptr); }

static int q_push(Worker *w, Res r) {
  if (w->qn == w->qcap) {
    int nc = w->qcap ? w->qcap * 2 : 8;
    Res *q = malloc(sizeof *q * (size_t)nc);
    if (!q) return -1;
    for (int j = 0; j < w->qn; j++) q[j] = w->q[(w->qhead + j) % w->qcap];
    free(w->q); w->q = q; w->qcap = nc; w->qhead = 0;
  }
  w->q[(w->qhead + w->qn++) % w->qcap] = r;
  return 0;
}

/* the child: tasks in, results out, until its socket closes */
static void worker_main(nb_VM *vm, nb_Value fn, int sock, int index) {
  signal(SIGINT, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  nt_set_num_threads(1);   /* every library's pool: OpenMP, OpenBLAS, oneDNN's primitives */
  /* the parent's sink may be a Jupyter kernel's or a dist worker's, whose
  ** sockets and threads belong to the parent: a worker's prints go to the
  ** process's own stdout/stderr instead */
  nb_vm_set_sink(vm, nb_stdio_sink());
  for (;;) {
    TaskHdr t;
    if (read_all(sock, &t, sizeof t) || t.len > MAX_MSG_BYTES) _exit(0);
    char *arg = malloc(t.len ? t.len : 1);
    if (!arg || read_all(sock, arg, t.len)) _exit(0);
    nb_Value a, r;
    nb_Buf b = {0};
    int status = RES_OK;
    int st = nbZ_deserialize(vm, arg, t.len, &a);
    free(arg);
    if (!st) { st = nb_pcall(vm, fn, &a, 1, &r); nb_decref(a); }
    if (!st) { st = nbZ_serialize(vm, r, &b); nb_decref(r); }
    if (st) {
      nbE_finish(vm);
      const nb_ErrorInfo *e = nb_last_error(vm);
      b.n = 0;
      nbB_printf(&b, "%s", e ? (e->report && *e->report ? e->report : e->message) : "unknown error");
      status = RES_ERR;
    }
    int fd = memfd_create("nabla-batch", MFD_CLOEXEC);
    if (fd < 0 || write_all(fd, b.p ? b.p : "", b.n)) {
      fprintf(stderr, "data.loader: worker %d: cannot write a batch to shared memory: %s\n", index, strerror(errno));
      _exit(3);
    }
    ResHdr h = { t.k, b.n, (uint32_t)status, 0 };
    nbB_free(&b);
    fflush(stdout); fflush(stderr);   /* the batch's prints are out before it is (a worker ends by SIGKILL) */
    if (send_result(sock, &h, fd)) _exit(0);
    close(fd);
  }
}

static Pool *pool_of(nb_VM *vm, const char *fname, nb_Value v) {
  if (v.t != NB_THANDLE || strcmp(((nb_Handle *)v.u.p)->kind, "loader_pool") != 0) {
    nb_error_kind(vm, "TypeError", "%s: expected a loader pool, got %s", fname, nb_typename(v));
    return NULL;
  }
  Pool *p = ((nb_Handle *)v.u.p)->ptr;
  if (p->closed) { nb_error_kind(vm, "ValueError", "%s: the loader's workers were stopped (closed, or an error or interrupt ended them)", fname); return NULL; }
  return p;
}

/* loader_pool_start(fn, workers) */
static int b_pool_start(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "loader_pool_start";
  if (args[0].t != NB_TFUNC && args[0].t != NB_TBUILTIN) return nb_arg_type_error(vm, fname, "fn", "a function", args[0]);
  int64_t nw;
  if (nbT_int_arg(vm, fname, "workers", args[1], &nw)) return NB_ERR;
  if (nw < 1 || nw > MAX_WORKERS) return nb_error_kind(vm, "ValueError", "%s: workers must be in 1..%d, got %lld", fname, MAX_WORKERS, (long long)nw);
  Pool *p = calloc(1, sizeof *p);
  if (!p) return nb_memory_error(vm, fname, sizeof *p);
  for (int i = 0; i < MAX_WORKERS; i++) p->w[i].sock = -1;
  fflush(NULL);   /* nothing buffered is written twice by a child */
  pid_t parent = getpid();
  for (int i = 0; i < nw; i++) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
      pool_free(p);
      return nb_error_kind(vm, "OSError", "%s: socketpair: %s", fname, strerror(errno));
    }
    pid_t pid = fork();
    if (pid < 0) {
      int e = errno;
      close(sv[0]); close(sv[1]); pool_free(p);
      return nb_error_kind(vm, "OSError", "%s: fork: %s", fname, strerror(e));
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(0);
      close(sv[0]);
      for (int j = 0; j < i; j++) close(p->w[j].sock);   /* siblings' sockets: theirs */
      worker_main(vm, args[0], sv[1], i);
      _exit(0);
    }
    close(sv[1]);
    p->w[i].pid = pid; p->w[i].sock = sv[0];
    p->n = i + 1;
  }
  *out = nb_obj(NB_THANDLE, nbH_new("loader_pool", p, pool_free));
  return NB_OK;
}

/* loader_pool_submit(pool, arg): the next batch's task (batch numbers count from 0) */
static int b_pool_submit(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "loader_pool_submit";
  Pool *p = pool_of(vm, fname, args[0]);
  if (!p) return NB_ERR;
  nb_Buf b = {0};
  if (nbZ_serialize(vm, args[1], &b)) { nbB_free(&b); return NB_ERR; }
  Worker *w = &p->w[p->next_submit % (uint64_t)p->n];
  TaskHdr t = { p->next_submit, b.n };
  int rc = write_all(w->sock, &t, sizeof t);
  if (!rc) rc = write_all(w->sock, b.p ? b.p : "", b.n);
  nbB_free(&b);
  if (rc) {
    int e = errno;
    pool_close(p);
    return nb_error_kind(vm, "RuntimeError", "data.loader: cannot send batch %llu to worker %d (%s): the worker is gone",
                         (unsigned long long)t.k, (int)(t.k % (uint64_t)p->n), strerror(e));
  }
  w->sent++;
  p->next_submit++;
  *out = nb_int((double)t.k);
  return NB_OK;
}

/* drains what has arrived from worker i without blocking: 0, or -1 (gone) */
static int drain(Worker *w) {
  for (;;) {
    Res r;
    int got = recv_result(w->sock, &r.h, &r.fd, false);
    if (got == 0) return 0;
    if (got < 0) return -1;
    if (q_push(w, r)) { close(r.fd); return -1; }
  }
}

static int worker_gone(nb_VM *vm, Pool *p, int i, uint64_t k) {
  char why[96] = "its connection closed";
  int status;
  pid_t pid = p->w[i].pid;
  if (pid > 0 && waitpid(pid, &status, WNOHANG) == pid) {
    p->w[i].pid = 0;
    if (WIFSIGNALED(status)) snprintf(why, sizeof why, "it was killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else if (WIFEXITED(status)) snprintf(why, sizeof why, "it exited with code %d", WEXITSTATUS(status));
  }
  pool_close(p);
  return nb_error_kind(vm, "RuntimeError", "data.loader: worker %d stopped while preparing batch %llu: %s", i, (unsigned long long)k, why);
}

/* loader_pool_take(pool): the next batch's value, in submission order */
static int b_pool_take(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "loader_pool_take";
  Pool *p = pool_of(vm, fname, args[0]);
  if (!p) return NB_ERR;
  uint64_t k = p->next_take;
  if (k >= p->next_submit) return nb_error_kind(vm, "ValueError", "%s: batch %llu was never submitted", fname, (unsigned long long)k);
  int i = (int)(k % (uint64_t)p->n);
  Worker *w = &p->w[i];
  while (w->qn == 0) {
    struct pollfd pf = { w->sock, POLLIN, 0 };
    int r = poll(&pf, 1, 50);
    if (nb_vm_interrupted(vm)) { pool_close(p); return nbV_interrupt_error(vm); }
    if (r < 0 && errno != EINTR) { pool_close(p); return nb_error_kind(vm, "OSError", "data.loader: poll: %s", strerror(errno)); }
    if (r > 0 && drain(w) && w->qn == 0) return worker_gone(vm, p, i, k);
  }
  Res res = w->q[w->qhead];
  w->qhead = (w->qhead + 1) % w->qcap; w->qn--;
  if (res.h.k != k) {
    close(res.fd); pool_close(p);
    return nb_error_kind(vm, "RuntimeError", "data.loader: worker %d sent batch %llu where batch %llu was due (a loader bug)", i,
                         (unsigned long long)res.h.k, (unsigned long long)k);
  }
  p->next_take++; w->taken++;
  int st = NB_OK;
  char *m = NULL;
  if (res.h.len > MAX_MSG_BYTES) st = nb_error_kind(vm, "RuntimeError", "data.loader: batch %llu is too large (%llu bytes)", (unsigned long long)k, (unsigned long long)res.h.len);
  else if (res.h.len && (m = mmap(NULL, res.h.len, PROT_READ, MAP_PRIVATE, res.fd, 0)) == MAP_FAILED) {
    m = NULL;
    st = nb_error_kind(vm, "OSError", "data.loader: cannot map batch %llu: %s", (unsigned long long)k, strerror(errno));
  }
  close(res.fd);
  if (!st && res.h.status == RES_ERR) {
    st = nb_error_kind(vm, "WorkerError", "data.loader: worker %d failed on batch %llu:\n%.*s", i, (unsigned long long)k,
                       (int)(res.h.len > 60000 ? 60000 : res.h.len), m ? m : "");
    pool_close(p);
  } else if (!st) st = nbZ_deserialize(vm, m ? m : "", res.h.len, out);
  if (m) munmap(m, res.h.len);
  return st;
}

/* loader_pool_ready(pool): results that have arrived and wait to be taken */
static int b_pool_ready(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "loader_pool_ready";
  Pool *p = pool_of(vm, fname, args[0]);
  if (!p) return NB_ERR;
  int total = 0;
  for (int i = 0; i < p->n; i++) {
    if (drain(&p->w[i]) && p->w[i].qn == 0 && p->w[i].sent > p->w[i].taken) return worker_gone(vm, p, i, p->w[i].sent);
    total += p->w[i].qn;
  }
  *out = nb_int(total);
  return NB_OK;
}

static int b_pool_close(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; (void)vm;
  if (args[0].t == NB_THANDLE && !strcmp(((nb_Handle *)args[0].u.p)->kind, "loader_pool")) pool_close(((nb_Handle *)args[0].u.p)->ptr);
  *out = nb_nil();
  return NB_OK;
}

/* ------------------------------------------------------------ the permutation
** loader_permutation(n, seed, epoch): a permutation of 0..n-1 that depends
** only on (seed, epoch): Fisher-Yates driven by splitmix64 over a key mixed
** from both, with Lemire's unbiased bounded draw.  Independent of the global
** generator, so a training step's dropout and the loader's order do not
** disturb each other, and every rank computes the same order from the same
** seed and epoch (the distributed sampler's shards). */
static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static uint64_t bounded(uint64_t *s, uint64_t range) {   /* uniform in [0, range) */
  unsigned __int128 m = (unsigned __int128)splitmix64(s) * range;
  uint64_t lo = (uint64_t)m;
  if (lo < range) {
    uint64_t t = -range % range;
    while (lo < t) { m = (unsigned __int128)splitmix64(s) * range; lo = (uint64_t)m; }
  }
  return (uint64_t)(m >> 64);
}
static int b_permutation(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "loader_permutation";
  int64_t len, seed, epoch;
  if (nbT_int_arg(vm, fname, "n", args[0], &len) || nbT_int_arg(vm, fname, "seed", args[1], &seed) ||
      nbT_int_arg(vm, fname, "epoch", args[2], &epoch)) return NB_ERR;
  if (len < 0 || len > ((int64_t)1 << 40)) return nb_error_kind(vm, "ValueError", "%s: n must be in 0..2^40, got %lld", fname, (long long)len);
  int64_t shape[1] = { len };
  nt_Tensor *t = nt_empty(shape, 1, NT_I64, NT_CPU);
  if (!t) return nbT_err(vm);
  int64_t *d = nt_data_ptr(t);
  for (int64_t i = 0; i < len; i++) d[i] = i;
  uint64_t s = (uint64_t)seed * 0xD1B54A32D192ED03ull ^ (uint64_t)epoch * 0x8CB92BA72F3D8DD7ull ^ 0x6A09E667F3BCC909ull;
  for (int64_t i = len - 1; i > 0; i--) {
    int64_t j = (int64_t)bounded(&s, (uint64_t)i + 1);
    int64_t x = d[i]; d[i] = d[j]; d[j] = x;
  }
  return nbT_ret(vm, t, out);
}

/* ------------------------------------------------------------ to the device
** loader_to_device(tree, device, ring=nil): the tree with every tensor moved
** to device.  With a ring (loader_pin_ring(); CUDA only), each tensor is
** first copied into page-locked host memory and then to the device by an
** asynchronous copy queued on the compute stream (ordered before every op
** that uses it; the host does not wait, so it goes on preparing the next
** batch while the copy runs).  The ring keeps the last PIN_RING staging
** tensors, each with an event recorded after its copy: a slot is reused only
** after its event is waited for (long done by then), so a staging buffer is
** never freed or overwritten while its copy reads it; the ring's finalizer
** (the loader freed or closed) waits for each before releasing it. */
#define PIN_RING 8
typedef struct PinSlot { nt_Tensor *host; void *ev; } PinSlot;
typedef struct PinRing { PinSlot s[PIN_RING]; int next; } PinRing;
typedef struct ToDev { nt_Device dev; PinRing *ring; } ToDev;

static void ring_free(void *ptr) {
  PinRing *r = ptr;
  for (int i = 0; i < PIN_RING; i++) {
    if (r->s[i].ev) { nt_cuda_event_wait(r->s[i].ev); nt_cuda_event_destroy(r->s[i].ev); }
    if (r->s[i].host) nt_release(r->s[i].host);
  }
  free(r);
}

static int b_pin_ring(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)args; (void)n;
  PinRing *r = calloc(1, sizeof *r);
  if (!r) return nb_memory_error(vm, "loader_pin_ring", sizeof *r);
  *out = nb_obj(NB_THANDLE, nbH_new("loader_pin_ring", r, ring_free));
  return NB_OK;
}

static int to_device_leaf(nb_VM *vm, void *vctx, nb_Value leaf, nb_Value *out) {
  ToDev *c = vctx;
  if (leaf.t != NB_TTENSOR || T(leaf)->device == c->dev) { nb_incref(leaf); *out = leaf; return NB_OK; }
  nt_Tensor *x = T(leaf);
  if (!c->ring || c->dev != NT_CUDA || x->device != NT_CPU) return nbT_ret(vm, nt_to_device(x, c->dev), out);
  nt_Tensor *src = nt_contiguous(x);
  if (!src) return nbT_err(vm);
  size_t nb = (size_t)src->numel * nt_dtype_size(src->dtype);
  PinSlot *sl = &c->ring->s[c->ring->next];
  if (sl->ev && nt_cuda_event_wait(sl->ev)) { nt_release(src); return nbT_err(vm); }
  if (sl->host) { nt_release(sl->host); sl->host = NULL; }
  nt_Tensor *h = nt_cuda_pinned_empty(src->shape, src->ndim, src->dtype);
  nt_Tensor *d = h ? nt_empty(src->shape, src->ndim, src->dtype, NT_CUDA) : NULL;
  if (!h || !d) { nt_release(src); if (h) nt_release(h); return nbT_err(vm); }
  memcpy(nt_base(h), nt_base(src), nb);
  nt_release(src);
  if (!sl->ev && !(sl->ev = nt_cuda_event_create())) { nt_release(h); nt_release(d); return nbT_err(vm); }
  if (nt_cuda_copy_async(nt_base(d), nt_base(h), nb, 1, NULL) || nt_cuda_event_record(sl->ev, NULL)) {
    nt_release(h); nt_release(d); return nbT_err(vm);
  }
  sl->host = h;
  c->ring->next = (c->ring->next + 1) % PIN_RING;
  *out = nb_obj(NB_TTENSOR, d);
  return NB_OK;
}
static int b_to_device(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "loader_to_device";
  ToDev c = { NT_CPU, NULL };
  if (nbT_device_arg(vm, fname, args[1], &c.dev)) return NB_ERR;
  if (args[2].t == NB_THANDLE && !strcmp(((nb_Handle *)args[2].u.p)->kind, "loader_pin_ring")) c.ring = ((nb_Handle *)args[2].u.p)->ptr;
  else if (args[2].t != NB_TNIL) return nb_arg_type_error(vm, fname, "ring", "nil or a loader_pin_ring()", args[2]);
  if (args[0].t == NB_TTENSOR) return to_device_leaf(vm, &c, args[0], out);
  return nbT_tree_walk_mode(vm, args[0], NBT_ALL, to_device_leaf, &c, NULL, out);
}

/* ------------------------------------------------------------ the table */
static nb_Builtin loader_builtins[] = {
  { "loader_pool_start", b_pool_start, "fn, workers", "loader_pool_start(fn, workers): forks worker processes that run fn(arg) for data.loader (docs/stdlib.md)" },
  { "loader_pool_submit", b_pool_submit, "pool, arg", "loader_pool_submit(pool, arg): queues the next batch's fn(arg) on worker k % workers; returns k" },
  { "loader_pool_take", b_pool_take, "pool", "loader_pool_take(pool): the next batch's value in submission order (raises a worker's error with its report)" },
  { "loader_pool_ready", b_pool_ready, "pool", "loader_pool_ready(pool): how many batches are finished and waiting" },
  { "loader_pool_close", b_pool_close, "pool", "loader_pool_close(pool): stops and reaps the workers" },
  { "loader_permutation", b_permutation, "n, seed, epoch", "loader_permutation(n, seed, epoch): an i64 permutation of 0..n-1 fixed by (seed, epoch), not the global generator" },
  { "loader_to_device", b_to_device, "tree, device, ring=nil", "loader_to_device(tree, device, ring=nil): tensors to device; with a loader_pin_ring(): through pinned memory, asynchronously (CUDA)" },
  { "loader_pin_ring", b_pin_ring, "", "loader_pin_ring(): pinned staging buffers for loader_to_device, released (after their copies) with the handle" },
  { NULL, NULL, NULL, NULL }
};
void nbopen_loader(void) { nbC_register(loader_builtins); }
