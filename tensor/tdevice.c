/*
** tdevice.c — run-time loader of the CUDA backend module (see tdevice.h).
**
** The module is dlopened once, on the first request for a CUDA tensor (or a
** nt_cuda_* query).  The outcome — ready, or the reason it is not — is
** remembered: a machine without a GPU pays for one failed attempt only.  On
** failure the module is NOT dlclosed (its runtime may hold allocations that
** LeakSanitizer would otherwise report, and re-trying is pointless).
**
** The module gets every core function it needs through nt_HostApi, so the
** nabla binary does not have to export its symbols (-rdynamic) and libnabla
** can stay a static library.  The other way, the module fills nt_DeviceApi;
** the nt_cuda_comm_* / staging functions at the end forward to it (NCCL and
** pinned staging for dist/, cuda/nccl.cu).
*/
#include "tinternal.h"
#include "tdevice.h"
#include "tcompile.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>

/* NT_CUDA_MODULE_BUILD / NT_CUDA_EMU_MODULE_BUILD (the modules' paths in the
** build tree) and NT_CUDA_BUILT / NT_CUDA_EMU_BUILT (0 when the build could
** not make them) come from the build as -D defines (cuda/meson.build's
** nt_cuda_path_args); a build without them only skips those candidates. */

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static bool cuda_ready;
static char cuda_reason[768] = "not loaded yet";
static char cuda_msg[800];
static nt_DeviceApi cuda_api;
static void *cuda_handle;
static bool cuda_emulated;         /* the loaded module is the emulated device */
static int matmul_tf32;            /* read live by the module */

/* snprintf that may truncate (messages, paths) */
static void fmt(char *buf, size_t n, const char *f, ...) __attribute__((format(printf, 3, 4)));
static void fmt(char *buf, size_t n, const char *f, ...) {
  va_list ap;
  va_start(ap, f);
  vsnprintf(buf, n, f, ap);
  va_end(ap);
}

static bool file_exists(const char *p) { return p && *p && access(p, R_OK) == 0; }

/* Directory of the running executable (no trailing slash), or "" */
static void exe_dir(char *buf, size_t n) {
  ssize_t k = readlink("/proc/self/exe", buf, n - 1);
  if (k <= 0) { buf[0] = 0; return; }
  buf[k] = 0;
  char *slash = strrchr(buf, '/');
  if (slash) *slash = 0; else buf[0] = 0;
}

/* Whether NABLA_CUDA_EMULATE asks for the emulated device: "1" (any value
** but "0") unless an NVIDIA GPU is present, "force" always. */
static bool want_emulation(void) {
  const char *e = getenv("NABLA_CUDA_EMULATE");
  if (!e || !*e || !strcmp(e, "0")) return false;
  if (!strcmp(e, "force")) return true;
  return !file_exists("/dev/nvidiactl") && !file_exists("/dev/nvidia0");
}

/* Picks the module path; false (with the list of places tried) if none. */
static bool find_module(char *path, size_t n) {
  const char *env = getenv("NABLA_CUDA_MODULE");
  if (env && *env) {
    fmt(path, n, "%s", env);
    cuda_emulated = strstr(path, "nabla_cuda_emu") != NULL;
    if (file_exists(path)) return true;
    fmt(cuda_reason, sizeof cuda_reason, "NABLA_CUDA_MODULE=%s: no such file", env);
    return false;
  }
  cuda_emulated = want_emulation();
  const char *so = cuda_emulated ? "nabla_cuda_emu.so" : "nabla_cuda.so";
  char dir[PATH_MAX];
  exe_dir(dir, sizeof dir);
  /* The executable's own layout first: <d>/cuda/ (emulated: <d>/cuda/emu/)
  ** for its directory and up to three of its parents (test programs live in
  ** <build>/tests/<area>/), then the installed layout, then the build tree it
  ** was built in.  A build tree copied elsewhere (the GPU kit of
  ** tools/gpu-session.sh) thus finds its own module, never a stale one at
  ** the build machine's path. */
  const char *sub = cuda_emulated ? "emu/" : "";
  char cand[7][PATH_MAX + 64];
  int nc = 0;
  char up[PATH_MAX];
  fmt(up, sizeof up, "%s", dir);
  for (int level = 0; level <= 3 && up[0]; level++) {
    fmt(cand[nc++], sizeof cand[0], "%s/cuda/%s%s", up, sub, so);
    char *slash = strrchr(up, '/');
    if (!slash || slash == up) break;
    *slash = 0;
  }
  fmt(cand[nc++], sizeof cand[0], "%s/../lib/nabla/%s", dir, so);
#ifdef NT_CUDA_MODULE_BUILD
  if (!cuda_emulated) fmt(cand[nc++], sizeof cand[0], "%s", NT_CUDA_MODULE_BUILD);
#endif
#ifdef NT_CUDA_EMU_MODULE_BUILD
  if (cuda_emulated) fmt(cand[nc++], sizeof cand[0], "%s", NT_CUDA_EMU_MODULE_BUILD);
#endif
  for (int i = 0; i < nc; i++)
    if (file_exists(cand[i])) { fmt(path, n, "%s", cand[i]); return true; }
#if defined(NT_CUDA_EMU_BUILT) && !NT_CUDA_EMU_BUILT
  if (cuda_emulated) {
    fmt(cuda_reason, sizeof cuda_reason, "NABLA_CUDA_EMULATE: this build has no emulated CUDA device (it needs clang++ and CUDA's headers, and -Dcuda not disabled)");
    return false;
  }
#endif
#if defined(NT_CUDA_BUILT) && !NT_CUDA_BUILT
  if (!cuda_emulated) {
    fmt(cuda_reason, sizeof cuda_reason, "this build has no CUDA backend (configured with -Dcuda=disabled or without nvcc)");
    return false;
  }
#endif
  char tried[sizeof cuda_reason] = "";
  for (int i = 0; i < nc; i++)
    fmt(tried + strlen(tried), sizeof tried - strlen(tried), "%s%s", i ? ", " : "", cand[i]);
  fmt(cuda_reason, sizeof cuda_reason, "backend module %s not found (looked in %s; set NABLA_CUDA_MODULE)", so, tried);
  return false;
}

/* NABLA_CUDA_SYNC: unset, "" or "0" = off, "1" = wait for every launch;
** false (the reason set) for anything else: a typo must not silently leave
** the debug mode off. */
static bool sync_mode_from_env(int *on) {
  const char *v = getenv("NABLA_CUDA_SYNC");
  *on = 0;
  if (!v || !*v || !strcmp(v, "0")) return true;
  if (!strcmp(v, "1")) { *on = 1; return true; }
  fmt(cuda_reason, sizeof cuda_reason, "NABLA_CUDA_SYNC=%.40s: expected 0 or 1 (1 waits for every GPU launch, so a fault names the op that raised it)", v);
  return false;
}

/* ---- results of GPU work that failed (textend.h nt_dev_check) -----------------
** A kernel that finds a bad index writes the error slot and leaves garbage;
** the module reports it after the next wait for the stream, which closes the
** epoch (epoch_close before the wait, epoch_failed after it when the slot was
** set).  The failed epochs are kept, ascending, with their messages, so a
** storage last written in one is refused.  A check costs one compare when the
** storage was written after the last failed epoch (almost always); an older
** storage is looked up once (under the lock: the dist communication thread
** may synchronise) and, if clean, marked 0 (done, clean).  Each failed epoch
** costs 16 bytes for the session; its message is kept for the first
** POISON_MSGS of them.
** Threads: the module serialises its syncs (close, wait, read the slot), and
** a dispatch marks its output with the epoch read after the launch, so the
** slot's error belongs to the epoch closed or the next one: both are failed.
** Left open: outputs a kernel reaches through `extra` are marked when
** allocated (nt_empty), just before the launch; a sync on another thread in
** that window, followed by an error of that very kernel, leaves them marked
** with the earlier, clean epoch. */
_Atomic uint64_t nt_dev_epoch_ = 1;
static _Atomic uint64_t last_poisoned;
static pthread_mutex_t poison_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t *poisoned;         /* ascending */
static char **poison_msg;          /* [i] for i < POISON_MSGS */
static size_t npoisoned, cap_poisoned;
static uint64_t lost_upto;         /* epochs up to this one may have failed unlisted */
#define POISON_MSGS 1024
#define POISON_MSG_MAX 400

static uint64_t epoch_close(void) { return atomic_fetch_add(&nt_dev_epoch_, 1); }

static bool poison_add(uint64_t e, char *msg) {
  bool used = false;
  if (npoisoned && poisoned[npoisoned - 1] >= e) return false;   /* listed already (a concurrent sync) */
  if (npoisoned == cap_poisoned) {
    size_t nc = cap_poisoned ? 2 * cap_poisoned : 16;
    uint64_t *p = realloc(poisoned, nc * sizeof *p);
    if (p) { poisoned = p; cap_poisoned = nc; }
  }
  if (npoisoned == cap_poisoned) { lost_upto = e; return false; }   /* no memory to list it: refuse every result up to here */
  if (npoisoned < POISON_MSGS) {
    if (!poison_msg) poison_msg = calloc(POISON_MSGS, sizeof *poison_msg);
    if (poison_msg) { poison_msg[npoisoned] = msg; used = true; }
  }
  poisoned[npoisoned++] = e;
  return used;
}

static void epoch_failed(uint64_t e, const char *err) {
  pthread_mutex_lock(&poison_lock);
  char *msg = npoisoned < POISON_MSGS ? strndup(err, POISON_MSG_MAX) : NULL;
  bool used = poison_add(e, msg);
  if (poison_add(e + 1, msg)) used = true;
  if (!used) free(msg);
  if (atomic_load(&last_poisoned) < e + 1) atomic_store(&last_poisoned, e + 1);
  uint64_t cur = e + 1;   /* work after the report: a fresh epoch (unless another sync began one) */
  atomic_compare_exchange_strong(&nt_dev_epoch_, &cur, e + 2);
  pthread_mutex_unlock(&poison_lock);
}

/* The message of the failed epoch s was written in, or NULL (s usable). */
static const char *poison_of(nt_Storage *s) {
  uint64_t e = s->dev_epoch;
  if (__builtin_expect(e == 0 || e > atomic_load_explicit(&last_poisoned, memory_order_relaxed), 1)) return NULL;
  const char *m = NULL;
  pthread_mutex_lock(&poison_lock);
  size_t lo = 0, hi = npoisoned;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (poisoned[mid] < e) lo = mid + 1; else hi = mid;
  }
  if (lo < npoisoned && poisoned[lo] == e)
    m = lo < POISON_MSGS && poison_msg && poison_msg[lo] ? poison_msg[lo] : "a GPU data error (its message was not kept)";
  else if (e <= lost_upto) m = "a GPU data error (not recorded: out of host memory)";
  pthread_mutex_unlock(&poison_lock);
  if (!m) s->dev_epoch = 0;   /* its epoch ended clean: no lookup next time */
  return m;
}

int nt_dev_check(const nt_Tensor *t, const char *what) {
  if (!t || t->storage->device == NT_CPU) return 0;
  const char *m = poison_of(t->storage);
  if (!m) return 0;
  NT_FAIL("%s: this tensor was computed by the GPU work in which %s failed; its values are unusable (recompute it)", what, m);
}

void nt_dev_wrote_(nt_Storage *s) {
  if (!poison_of(s)) s->dev_epoch = atomic_load_explicit(&nt_dev_epoch_, memory_order_relaxed);
}

/* out's kernel overwrites all of out's storage (a fresh output, or a copy or
** fill into the whole of it): an unusable storage becomes usable again */
static bool covers_storage(const nt_Tensor *t) {
  return t->offset == 0 && (t->flags & NT_T_CONTIG) && (size_t)t->numel * nt_dtype_size(t->dtype) == t->storage->nbytes;
}

int nt_dispatch_device_(int op, nt_Kernel k, const nt_KernelArgs *a) {
  if (__builtin_expect(nt_graph_capturing_, 0) && nt_graph_on_dispatch_(op, a)) return -1;   /* tcompile.c */
  for (int i = 0; i < a->nin && i < 4; i++)
    if (a->in[i] && nt_dev_check(a->in[i], nt_op_name(op))) return -1;
  nt_Storage *os = a->out ? a->out->storage : NULL;
  if (os && os->device != NT_CPU && poison_of(os) && !covers_storage(a->out)) {
    char what[128];
    fmt(what, sizeof what, "%s (writing into part of it)", nt_op_name(op));
    return nt_dev_check(a->out, what);
  }
  int rc = k(a);
  /* read after the launch: a sync on another thread that began before it may not cover it */
  if (!rc && os && os->device != NT_CPU) os->dev_epoch = atomic_load_explicit(&nt_dev_epoch_, memory_order_relaxed);
  return rc;
}

static void load_cuda(void) {
  const char *dis = getenv("NABLA_CUDA_DISABLE");
  if (dis && *dis && strcmp(dis, "0") != 0) {
    fmt(cuda_reason, sizeof cuda_reason, "disabled by NABLA_CUDA_DISABLE");
    return;
  }
  int sync_launches;
  if (!sync_mode_from_env(&sync_launches)) return;
  char path[PATH_MAX + 64];
  if (!find_module(path, sizeof path)) return;
  dlerror();
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    fmt(cuda_reason, sizeof cuda_reason, "cannot load %s: %s", path, e ? e : "unknown dlopen error");
    return;
  }
  cuda_handle = h;
  nt_DeviceInitFn init;
  *(void **)&init = dlsym(h, "nabla_cuda_init");
  if (!init) {
    fmt(cuda_reason, sizeof cuda_reason, "%s has no nabla_cuda_init symbol", path);
    return;
  }
  nt_HostApi host = {
    .abi_version = NT_DEVICE_ABI_VERSION,
    .sizeof_tensor = sizeof(nt_Tensor), .sizeof_kernel_args = sizeof(nt_KernelArgs),
    .error_set = nt_error_set, .error_msg = nt_error_msg,
    .register_kernel = nt_register_kernel, .register_allocator = nt_register_allocator,
    .op_register = nt_op_register, .op_name = nt_op_name,
    .matmul_tf32 = &matmul_tf32,
    .sync_launches = sync_launches,
    .epoch_close = epoch_close, .epoch_failed = epoch_failed,
  };
  char why[512] = "";
  nt_init();   /* CPU kernels first: the module only adds NT_CUDA entries */
  if (init(&host, &cuda_api, why, sizeof why) != 0) {
    fmt(cuda_reason, sizeof cuda_reason, "%s", why[0] ? why : "the CUDA module failed to initialise");
    return;
  }
  cuda_ready = true;
  fmt(cuda_reason, sizeof cuda_reason, "ready");
}

static bool ensure_cuda(void) {
  pthread_once(&load_once, load_cuda);
  return cuda_ready;
}

int nt_device_load(nt_Device dev) {
  if (dev == NT_CPU) return 0;
  if (dev == NT_CUDA) {
    if (ensure_cuda()) return 0;
    NT_FAIL("%s", nt_device_unavailable_msg(dev));
  }
  NT_FAIL("unknown device %d", (int)dev);
}

const char *nt_device_unavailable_msg(nt_Device dev) {
  if (dev != NT_CUDA) return "device is not available";
  ensure_cuda();
  fmt(cuda_msg, sizeof cuda_msg, "CUDA is not available: %s", cuda_reason);
  return cuda_msg;
}

int nt_cuda_available(char *reason, size_t n) {
  bool ok = ensure_cuda();
  if (reason && n) fmt(reason, n, "%s", cuda_reason);
  return ok ? 1 : 0;
}

int nt_cuda_device_count(void) { return ensure_cuda() && cuda_api.device_count ? cuda_api.device_count() : 0; }

int nt_cuda_device_name(char *out, size_t n) {
  if (!ensure_cuda()) { nt_error_set("%s", nt_device_unavailable_msg(NT_CUDA)); return -1; }
  char name[256] = "CUDA device";
  if (cuda_api.device_name && cuda_api.device_name(name, sizeof name)) return -1;
  fmt(out, n, "%s%s", name, cuda_emulated ? " (emulated on the CPU)" : "");
  return 0;
}

/* the module exports it by name (cuda/attention.cu), outside the nt_DeviceApi table */
int nt_cuda_attention_backend(nt_AttentionBackend *o) {
  memset(o, 0, sizeof *o);
  if (!ensure_cuda()) { nt_error_set("%s", nt_device_unavailable_msg(NT_CUDA)); return -1; }
  int (*fn)(char *, size_t, char *, size_t, char *, size_t, long long *, int *, long long *);
  *(void **)&fn = dlsym(cuda_handle, "nabla_cuda_attention_backend");
  if (!fn) { nt_error_set("cuda.attention_backend: the loaded CUDA module has no nabla_cuda_attention_backend (an older build)"); return -1; }
  return fn(o->backend, sizeof o->backend, o->reason, sizeof o->reason, o->last, sizeof o->last, &o->cudnn_version,
            &o->nondeterministic, &o->plans);
}

int nt_cuda_synchronize(void) {
  /* never loads the module just to wait for nothing */
  if (!cuda_ready) return 0;
  return cuda_api.synchronize ? cuda_api.synchronize() : 0;
}

int nt_cuda_memory(size_t *allocated, size_t *cached, size_t *peak) {
  size_t a = 0, c = 0, p = 0;
  int rc = cuda_ready && cuda_api.memory ? cuda_api.memory(&a, &c, &p) : 0;
  if (allocated) *allocated = a;
  if (cached) *cached = c;
  if (peak) *peak = p;
  return rc;
}

int nt_cuda_empty_cache(void) { return cuda_ready && cuda_api.empty_cache ? cuda_api.empty_cache() : 0; }

_Static_assert(NT_CUDA_STATS_OPS == NT_OP_TABLE_SIZE + 1, "nt_CudaStats.by_op: a slot per op id plus one");
int nt_cuda_stats(nt_CudaStats *out) {
  memset(out, 0, sizeof *out);
  return cuda_ready && cuda_api.stats ? cuda_api.stats(out) : 0;
}
void nt_cuda_reset_stats(void) { if (cuda_ready && cuda_api.reset_stats) cuda_api.reset_stats(); }

int nt_set_matmul_precision(const char *p) {
  if (!p) NT_FAIL("set_matmul_precision: expected \"highest\", \"high\" or \"tf32\"");
  if (!strcmp(p, "highest") || !strcmp(p, "ieee") || !strcmp(p, "f32")) matmul_tf32 = 0;
  else if (!strcmp(p, "high") || !strcmp(p, "tf32") || !strcmp(p, "medium")) matmul_tf32 = 1;
  else NT_FAIL("set_matmul_precision: unknown precision \"%s\" (expected \"highest\", \"high\" or \"tf32\")", p);
  return 0;
}

const char *nt_get_matmul_precision(void) { return matmul_tf32 ? "high" : "highest"; }

/* ---- collectives and staging: thin forwards to the module (cuda/nccl.cu) ----
** Each one loads the module if needed; without CUDA it fails with the
** loader's reason, so callers (dist/) never test availability first. */
#define NEED_API(fn, fail_ret) do { \
    if (!ensure_cuda()) { nt_error_set("%s", nt_device_unavailable_msg(NT_CUDA)); return fail_ret; } \
    if (!cuda_api.fn) { nt_error_set("the CUDA module has no " #fn " (rebuild nabla_cuda.so)"); return fail_ret; } \
    /* a graph cannot capture collectives or side-stream work: the capture ends here (tcompile.h) */ \
    if (nt_graph_capturing_ && nt_cuda_graph_refuse("a collective, side-stream or pinned-memory call (" #fn ")")) return fail_ret; } while (0)

int nt_cuda_comm_available(char *reason, size_t n) {
  if (!ensure_cuda()) { if (reason && n) fmt(reason, n, "%s", nt_device_unavailable_msg(NT_CUDA)); return 0; }
  if (!cuda_api.comm_available) { if (reason && n) fmt(reason, n, "NCCL is not available: this CUDA module was built without it"); return 0; }
  return cuda_api.comm_available(reason, n);
}
const char *nt_cuda_comm_version(void) { return cuda_ready && cuda_api.comm_version ? cuda_api.comm_version() : ""; }
int nt_cuda_device_id(char *out, size_t n) { NEED_API(device_id, -1); return cuda_api.device_id(out, n); }
int nt_cuda_comm_unique_id(unsigned char id[NT_COMM_ID_BYTES]) { NEED_API(comm_unique_id, -1); return cuda_api.comm_unique_id(id); }
nt_CudaComm *nt_cuda_comm_init(const unsigned char id[NT_COMM_ID_BYTES], int nranks, int rank, int timeout_ms, volatile int *interrupted) {
  NEED_API(comm_init, NULL);
  return cuda_api.comm_init(id, nranks, rank, timeout_ms, interrupted);
}
nt_CudaComm *nt_cuda_comm_split(nt_CudaComm *parent, int color, int key, int *failed) {
  *failed = 1;
  NEED_API(comm_split, NULL);
  return cuda_api.comm_split(parent, color, key, failed);
}
void nt_cuda_comm_abort(nt_CudaComm *c) { if (c && cuda_ready && cuda_api.comm_abort) cuda_api.comm_abort(c); }
void nt_cuda_comm_destroy(nt_CudaComm *c) { if (c && cuda_ready && cuda_api.comm_destroy) cuda_api.comm_destroy(c); }
int nt_cuda_comm_all_reduce(nt_CudaComm *c, void *buf, size_t count, nt_DType dt, int op) {
  NEED_API(comm_all_reduce, -1); return cuda_api.comm_all_reduce(c, buf, count, dt, op);
}
int nt_cuda_comm_all_reduce_async(nt_CudaComm *c, void *buf, size_t count, nt_DType dt, int op) {
  NEED_API(comm_all_reduce_async, -1); return cuda_api.comm_all_reduce_async(c, buf, count, dt, op);
}
int nt_cuda_comm_join(nt_CudaComm *c) { NEED_API(comm_join, -1); return cuda_api.comm_join(c); }
int nt_cuda_comm_reduce_scatter(nt_CudaComm *c, const void *send, void *recv, size_t recvcount, nt_DType dt, int op) {
  NEED_API(comm_reduce_scatter, -1); return cuda_api.comm_reduce_scatter(c, send, recv, recvcount, dt, op);
}
int nt_cuda_comm_all_gather(nt_CudaComm *c, const void *send, void *recv, size_t sendbytes) {
  NEED_API(comm_all_gather, -1); return cuda_api.comm_all_gather(c, send, recv, sendbytes);
}
int nt_cuda_comm_broadcast(nt_CudaComm *c, void *buf, size_t nbytes, int root) {
  NEED_API(comm_broadcast, -1); return cuda_api.comm_broadcast(c, buf, nbytes, root);
}
int nt_cuda_comm_send(nt_CudaComm *c, const void *buf, size_t nbytes, int peer) { NEED_API(comm_send, -1); return cuda_api.comm_send(c, buf, nbytes, peer); }
int nt_cuda_comm_recv(nt_CudaComm *c, void *buf, size_t nbytes, int peer) { NEED_API(comm_recv, -1); return cuda_api.comm_recv(c, buf, nbytes, peer); }
int nt_cuda_comm_group_start(void) { NEED_API(comm_group_start, -1); return cuda_api.comm_group_start(); }
int nt_cuda_comm_group_end(nt_CudaComm *c) { NEED_API(comm_group_end, -1); return cuda_api.comm_group_end(c); }
void *nt_cuda_staging(size_t n) { NEED_API(staging, NULL); return cuda_api.staging(n); }
int nt_cuda_to_host(void *dst, const void *dev_src, size_t n) { NEED_API(to_host, -1); return cuda_api.to_host(dst, dev_src, n); }
int nt_cuda_to_device(void *dev_dst, const void *src, size_t n) { NEED_API(to_device, -1); return cuda_api.to_device(dev_dst, src, n); }

/* ---- streams, events, pinned host memory (tbackend.h): forwards to the module ---- */
void *nt_cuda_stream_create(void) { NEED_API(stream_create, NULL); return cuda_api.stream_create(); }
void nt_cuda_stream_destroy(void *s) { if (s && cuda_ready && cuda_api.stream_destroy) cuda_api.stream_destroy(s); }
void *nt_cuda_event_create(void) { NEED_API(event_create, NULL); return cuda_api.event_create(); }
void nt_cuda_event_destroy(void *ev) { if (ev && cuda_ready && cuda_api.event_destroy) cuda_api.event_destroy(ev); }
int nt_cuda_event_record(void *ev, void *s) { NEED_API(event_record, -1); return cuda_api.event_record(ev, s); }
int nt_cuda_stream_wait(void *s, void *ev) { NEED_API(stream_wait, -1); return cuda_api.stream_wait(s, ev); }
int nt_cuda_event_wait(void *ev) { NEED_API(event_wait, -1); return cuda_api.event_wait(ev); }
void *nt_cuda_timer_create(void) { NEED_API(timer_create, NULL); return cuda_api.timer_create(); }
int nt_cuda_timer_record(void *t) { NEED_API(timer_record, -1); return cuda_api.timer_record(t); }
int nt_cuda_timer_elapsed(void *a, void *b, double *ms) {
  NEED_API(timer_elapsed, -1);
  float f = 0;
  if (cuda_api.timer_elapsed(a, b, &f)) return -1;
  *ms = f;
  return 0;
}
void nt_cuda_timer_destroy(void *t) { if (t && cuda_ready && cuda_api.timer_destroy) cuda_api.timer_destroy(t); }
int nt_cuda_comm_all_gather_async(nt_CudaComm *c, const void *send, void *recv, size_t sendbytes, void *ev) {
  NEED_API(comm_all_gather_async, -1); return cuda_api.comm_all_gather_async(c, send, recv, sendbytes, ev);
}
int nt_cuda_copy_async(void *dst, const void *src, size_t n, int to_device, void *s) {
  NEED_API(copy_async, -1); return cuda_api.copy_async(dst, src, n, to_device, s);
}

/* Pinned storage.  A storage has no deleter of its own: the core frees it
** through its device's allocator, so the CPU allocator is wrapped (once, at
** the first pinned tensor): its alloc hands out pinned memory while
** nt_cuda_pinned_empty asks for it (a flag of this thread), and its free
** returns a pointer it handed out to the module (cudaFreeHost), any other to
** the plain CPU allocator.  Until the first pinned tensor nothing changes;
** after, a CPU free costs one atomic load while no pinned storage is alive,
** and a scan of the live pinned blocks (a handful: ZeRO keeps one or two
** per layout) while some are. */
static nt_Allocator cpu_plain;
static pthread_once_t pin_once = PTHREAD_ONCE_INIT;
static _Thread_local bool want_pinned;
static pthread_mutex_t pin_mu = PTHREAD_MUTEX_INITIALIZER;
static struct { void *p; size_t n; } *pins;        /* live pinned blocks (under pin_mu) */
static size_t npins, pin_cap, pin_bytes;
static _Atomic size_t pin_live;                    /* npins, read without the lock */
static char pin_err[300];

static void *pinned_alloc(size_t n) {
  if (!want_pinned) return cpu_plain.alloc(n);
  void *p = cuda_api.host_alloc(n);
  if (!p) { fmt(pin_err, sizeof pin_err, "%s", nt_error_msg()); return NULL; }
  pthread_mutex_lock(&pin_mu);
  if (npins == pin_cap) {
    size_t cap = pin_cap ? 2 * pin_cap : 16;
    void *q = realloc(pins, cap * sizeof *pins);
    if (!q) { pthread_mutex_unlock(&pin_mu); cuda_api.host_free(p); fmt(pin_err, sizeof pin_err, "out of memory"); return NULL; }
    pins = q; pin_cap = cap;
  }
  pins[npins].p = p; pins[npins].n = n; npins++; pin_bytes += n;
  pin_live = npins;
  pthread_mutex_unlock(&pin_mu);
  return p;
}

static void pinned_free(void *p) {
  if (p && pin_live) {
    pthread_mutex_lock(&pin_mu);
    for (size_t i = 0; i < npins; i++)
      if (pins[i].p == p) {
        pin_bytes -= pins[i].n;
        pins[i] = pins[--npins];
        pin_live = npins;
        if (!npins) { free(pins); pins = NULL; pin_cap = 0; }   /* nothing left for LeakSanitizer */
        pthread_mutex_unlock(&pin_mu);
        cuda_api.host_free(p);
        return;
      }
    pthread_mutex_unlock(&pin_mu);
  }
  cpu_plain.free(p);
}

static void pin_install(void) {
  cpu_plain = *nt_allocator(NT_CPU);
  nt_Allocator a = { pinned_alloc, pinned_free, cpu_plain.memcpy };
  nt_register_allocator(NT_CPU, &a);
}

nt_Tensor *nt_cuda_pinned_empty(const int64_t *shape, int ndim, nt_DType dt) {
  NEED_API(host_alloc, NULL);
  if (!cuda_api.host_free) { nt_error_set("the CUDA module has no host_free (rebuild nabla_cuda.so)"); return NULL; }
  pthread_once(&pin_once, pin_install);
  want_pinned = true;
  pin_err[0] = 0;
  nt_Tensor *t = nt_empty(shape, ndim, dt, NT_CPU);
  want_pinned = false;
  if (!t && pin_err[0]) nt_error_set("pinned host tensor: %s", pin_err);
  return t;
}

size_t nt_cuda_pinned_bytes(void) {
  pthread_mutex_lock(&pin_mu);
  size_t n = pin_bytes;
  pthread_mutex_unlock(&pin_mu);
  return n;
}

/* ---- CUDA graphs (cuda/graph.cu; tcompile.h) --------------------------------------- */
int nt_cuda_graph_begin(void) {
  if (!ensure_cuda()) { nt_error_set("%s", nt_device_unavailable_msg(NT_CUDA)); return -1; }
  if (!cuda_api.graph_begin) { nt_error_set("the CUDA module has no graph_begin (rebuild nabla_cuda.so)"); return -1; }
  return cuda_api.graph_begin();
}
void *nt_cuda_graph_end(char *reason, size_t n) {
  if (!cuda_ready || !cuda_api.graph_end) { nt_error_set("compile: no capture is running"); return NULL; }
  return cuda_api.graph_end(reason, n);
}
int nt_cuda_graph_launch(void *g) {
  if (!cuda_ready || !cuda_api.graph_launch) { nt_error_set("compile: no CUDA module to replay a graph on"); return -1; }
  return cuda_api.graph_launch(g);
}
void nt_cuda_graph_destroy(void *g) { if (g && cuda_ready && cuda_api.graph_destroy) cuda_api.graph_destroy(g); }
int nt_cuda_graph_refuse(const char *what) { return cuda_ready && cuda_api.graph_refuse ? cuda_api.graph_refuse(what) : 0; }
bool nt_cuda_graph_owns(const void *p) { return cuda_ready && cuda_api.graph_owns && cuda_api.graph_owns(p); }
int nt_cuda_graph_poke(void *dst, const uint64_t *bits, int n) {
  if (!cuda_ready || !cuda_api.graph_poke) { nt_error_set("compile: the CUDA module has no device scalars (an older module)"); return -1; }
  return cuda_api.graph_poke(dst, bits, n);
}
int nt_cuda_graph_set_rng(void *g, uint64_t seed, uint64_t delta) {
  if (!cuda_ready || !cuda_api.graph_set_rng) { nt_error_set("compile: the CUDA module cannot replay random numbers (an older module)"); return -1; }
  return cuda_api.graph_set_rng(g, seed, delta);
}
