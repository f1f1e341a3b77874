// runtime.cpp — the emulated CUDA device (docs/cuda.md, "Emulated device").
//
// Execution model.  A launch runs its blocks one after another on the calling
// thread (the module has one stream, and an in-order stream is exactly that).
// The threads of a block are cooperative fibers on their own small stacks: a
// thread runs until it reaches __syncthreads, a warp collective (shuffle,
// vote, __syncwarp) or its end, then the scheduler runs the next runnable
// thread.  A barrier completes when every thread that has not exited reached
// it; a warp collective when every lane of its mask reached it — so barriers
// and shuffles have CUDA's semantics, including its undefined cases, which are
// reported: a mask naming lanes that do not exist or have exited, lanes of one
// warp in different collectives, a block whose threads all wait (deadlock).
//
// Checking.  The module sources are compiled with
// -fsanitize-coverage=trace-loads,trace-stores: every load and store they make
// calls __sanitizer_cov_load/storeN below.  While a kernel runs, an access must
// fall in the thread's own stack, the launch's arguments, the block's shared
// memory (inside a variable) or device memory that is allocated (the caching
// allocator's blocks, at their requested size: cuda/emu/alloc_guard.cpp);
// anything else stops the kernel with a report naming the kernel, the thread
// and the source line, and the launch fails at the next synchronisation the
// way an illegal address does on a GPU.  Shared-memory accesses also feed the
// race detector: within one barrier interval, a byte written by one thread
// and read or written by another is a hazard (racecheck's RAW/WAR/WAW).
// In the ASan build the module is instrumented for ASan too, and device
// memory between allocations is poisoned, so both tools see the same fault.
//
// This file is NOT instrumented: the emulator's own bookkeeping is invisible
// to the checker.  The CUDA runtime API the module calls (devices, memory,
// streams, errors) is served by api.cpp; runtime.h is what the two share.
#define EMU_RUNTIME 1
#include "emu.h"
#include <set>
#include <vector>
#include <dlfcn.h>
#include <link.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "runtime.h"

namespace emu {

// (the device description, kDeviceName and the limits: runtime.h)
int num_sms(void) {
  const char *e = getenv("NABLA_EMU_SMS");                 // fewer SMs: smaller grids, more grid-stride wrap-around
  int n = e && *e ? atoi(e) : 132;
  return n >= 1 && n <= 1024 ? n : 132;
}
static bool racecheck_on(void) {
  const char *e = getenv("NABLA_EMU_RACECHECK");
  return !(e && !strcmp(e, "0"));
}

// ---- errors -----------------------------------------------------------------------------------
// last_error: what cudaGetLastError returns (launch configuration, bad arguments).
// fault: a kernel's failure, returned (once) by the next synchronising call.
std::mutex mu;                                      // guards everything below that host threads share
thread_local cudaError_t last_error = cudaSuccess;   // per host thread, as in CUDA
static cudaError_t fault = cudaSuccess;
static std::string fault_text;                             // its report, appended to cudaGetErrorString
std::string shown_text;                             // the report of the fault last returned

void report(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("nabla-emu: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

void set_fault(cudaError_t e, const std::string &text) {
  std::lock_guard<std::mutex> g(mu);
  if (fault == cudaSuccess) { fault = e; fault_text = text; }
}
cudaError_t take_fault(void) {
  std::lock_guard<std::mutex> g(mu);
  cudaError_t e = fault;
  if (e != cudaSuccess) { shown_text = fault_text; fault = cudaSuccess; fault_text.clear(); }
  return e;
}
cudaError_t fail(cudaError_t e) {
  last_error = e;
  return e;
}

// ---- source lines of code addresses ------------------------------------------------------------------
// addr2line on the module file; only on the report path.
// "cuda/nn.cu:45" for a path and line the compiler recorded
static std::string relative(std::string file) {
  // A location the compiler gave to the rewritten file (transform.py's
  // output, same line numbers) names the original: its #line directive says which.
  std::string line;
  size_t colon = file.rfind(':');
  if (colon != std::string::npos && colon + 1 < file.size() && isdigit((unsigned char)file[colon + 1])) {
    line = file.substr(colon);
    file.resize(colon);
  }
  if (file.size() > 8 && file.compare(file.size() - 8, 8, ".emu.cpp") == 0) {
    if (FILE *f = fopen(file.c_str(), "r")) {
      char first[1200] = "";
      if (fgets(first, sizeof first, f) && !strncmp(first, "#line 1 \"", 9)) {
        std::string orig = first + 9;
        orig.resize(orig.find('"') == std::string::npos ? 0 : orig.find('"'));
        if (!orig.empty()) file = orig;
      }
      fclose(f);
    }
  }
  // repository-relative: from the first "/cuda/" or "/tests/" on
  size_t cut = std::string::npos;
  for (const char *key : { "/cuda/", "/tests/" }) {
    size_t k = file.find(key);
    if (k != std::string::npos && (cut == std::string::npos || k < cut)) cut = k;
  }
  if (cut != std::string::npos) file = file.substr(cut + 1);
  return file + line;
}

// Source line of a code address in the module (or program): addr2line, only
// on the report path.  Of an inlined chain, the first frame outside the
// emulator's own headers (the kernel's line, not emu.h's).
static std::string where(const void *pc) {
  Dl_info info;
  if (!pc || !dladdr(pc, &info) || !info.dli_fname) return "?";
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "addr2line -C -i -f -e '%s' 0x%lx 2>/dev/null", info.dli_fname,
           (unsigned long)((uintptr_t)pc - 1 - (uintptr_t)info.dli_fbase));
  FILE *p = popen(cmd, "r");
  if (!p) return "?";
  char fn[512], loc[512];
  std::string best;
  while (fgets(fn, sizeof fn, p) && fgets(loc, sizeof loc, p)) {
    loc[strcspn(loc, "\n")] = 0;
    if (char *d = strstr(loc, " (discriminator")) *d = 0;
    if (!loc[0] || loc[0] == '?') continue;
    if (best.empty() || best.find("/cuda/emu/") != std::string::npos) best = loc;
  }
  pclose(p);
  return best.empty() ? "?" : relative(best);
}

// ---- device memory map ---------------------------------------------------------------------------------
// raw: cudaMalloc'ed and pinned host ranges.  blocks: the caching allocator's
// blocks at their requested size; a raw range holding blocks (a segment) is
// valid only inside them.
std::map<uintptr_t, Range> raw;
std::map<uintptr_t, uintptr_t> blocks;              // start -> end
std::atomic<unsigned> map_gen{1};                   // bumped when a range goes away
size_t mem_used;

// the range [lo, hi) of valid memory holding [a, a + n), or false.  Caller holds mu.
static bool find_valid(uintptr_t a, size_t n, uintptr_t *lo, uintptr_t *hi) {
  auto b = blocks.upper_bound(a);
  if (b != blocks.begin()) {
    --b;
    if (a >= b->first && a + n <= b->second) { *lo = b->first; *hi = b->second; return true; }
  }
  auto r = raw.upper_bound(a);
  if (r != raw.begin()) {
    --r;
    if (a >= r->first && a + n <= r->second.end && !r->second.carved) { *lo = r->first; *hi = r->second.end; return true; }
  }
  return false;
}

// what is at a (for reports): "N bytes after a block of M bytes", ...
std::string describe_address(uintptr_t a) {
  std::lock_guard<std::mutex> g(mu);
  char buf[200];
  auto b = blocks.upper_bound(a);
  if (b != blocks.begin()) {
    --b;
    if (a >= b->second && a - b->second < (1u << 20)) {
      snprintf(buf, sizeof buf, "%lu bytes after the end of a %lu-byte device allocation", (unsigned long)(a - b->second),
               (unsigned long)(b->second - b->first));
      return buf;
    }
  }
  auto nb = blocks.lower_bound(a);
  if (nb != blocks.end() && nb->first - a < 4096) {
    snprintf(buf, sizeof buf, "%lu bytes before a %lu-byte device allocation", (unsigned long)(nb->first - a),
             (unsigned long)(nb->second - nb->first));
    return buf;
  }
  auto r = raw.upper_bound(a);
  if (r != raw.begin()) {
    --r;
    if (a < r->second.end) return r->second.carved ? "free device memory (inside a cached segment, in no allocation)" : "?";
    if (a - r->second.end < (1u << 20)) {
      snprintf(buf, sizeof buf, "%lu bytes after the end of a %lu-byte %s", (unsigned long)(a - r->second.end),
               (unsigned long)(r->second.end - r->first), r->second.pinned ? "pinned host allocation" : "cudaMalloc allocation");
      return buf;
    }
  }
  return "not device memory";
}

// [p, p + n) is device (or mapped) memory that a host-side call may touch
bool range_ok(const void *p, size_t n) {
  if (n == 0) return true;
  std::lock_guard<std::mutex> g(mu);
  uintptr_t lo, hi;
  return find_valid((uintptr_t)p, n, &lo, &hi);
}

bool device_range_ok(const void *p, size_t n, const char *what) {
  if (range_ok(p, n)) return true;
  char buf[400];
  snprintf(buf, sizeof buf, "%s: %zu bytes at %p are not device memory (%s)", what, n, p, describe_address((uintptr_t)p).c_str());
  report("%s", buf);
  set_fault(cudaErrorIllegalAddress, buf);
  return false;
}

}  // namespace emu

// allocator hooks (alloc_guard.cpp): the caching allocator's blocks
EXPORT void emu_note_block(void *p, size_t request, size_t rounded) {
  using namespace emu;
  capture_block_note(p, request, rounded, false);
  std::lock_guard<std::mutex> g(mu);
  uintptr_t a = (uintptr_t)p;
  blocks[a] = a + request;
  auto r = raw.upper_bound(a);
  if (r != raw.begin()) { --r; if (a < r->second.end) r->second.carved = true; }
#ifdef EMU_ASAN
  ASAN_UNPOISON_MEMORY_REGION(p, request);
  if (rounded > request && rounded < (64u << 20)) ASAN_POISON_MEMORY_REGION((char *)p + request, rounded - request);
#else
  (void)rounded;
#endif
}
EXPORT void emu_forget_block(void *p) {
  using namespace emu;
  capture_block_note(p, 0, 0, true);
  std::lock_guard<std::mutex> g(mu);
  auto b = blocks.find((uintptr_t)p);
  if (b == blocks.end()) return;
#ifdef EMU_ASAN
  size_t n = b->second - b->first;
  if (n < (64u << 20)) ASAN_POISON_MEMORY_REGION(p, n);
#endif
  blocks.erase(b);
  map_gen++;
}

// a replayed graph's block note (api.cpp, cudaGraphLaunch): the block's memory
// now belongs to it, so the notes left in that range by the captured work's
// later blocks (live when the capture ended: the graph's outputs, which the
// graph rewrites anyway) are dropped first
EXPORT void emu_note_block_replayed(void *p, size_t request, size_t rounded) {
  using namespace emu;
  {
    std::lock_guard<std::mutex> g(mu);
    uintptr_t a = (uintptr_t)p, e = a + (rounded > request ? rounded : request);
    auto b = blocks.lower_bound(a);
    if (b != blocks.begin()) { auto q = std::prev(b); if (q->second > a) blocks.erase(q); }
    for (b = blocks.lower_bound(a); b != blocks.end() && b->first < e;) b = blocks.erase(b);
    map_gen++;
  }
  emu_note_block(p, request, rounded);
}

// a graph's private pool given back to the cache (cuda/graph.cu): the notes
// its replays left for blocks that are free now are dropped
EXPORT void emu_forget_blocks_in(void *p, size_t n) {
  using namespace emu;
  std::lock_guard<std::mutex> g(mu);
  uintptr_t a = (uintptr_t)p;
  for (auto b = blocks.lower_bound(a); b != blocks.end() && b->first < a + n;) b = blocks.erase(b);
  map_gen++;
}

namespace emu {

// ---- fibers ---------------------------------------------------------------------------------------------
// A minimal x86-64 context switch: callee-saved registers, MXCSR and the x87
// control word go on the old stack, the stack pointer into *save.
extern "C" void emu_switch(void **save, void *to);
asm(R"(
.text
.globl emu_switch
.hidden emu_switch
.type emu_switch,@function
emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size emu_switch,.-emu_switch
)");

enum State { NOT_STARTED, RUNNABLE, WAIT_BARRIER, WAIT_WARP, DONE };

struct Launch;
struct Block;
struct Thread {
  uint3 tid;
  int linear, lane, warp;
  State state;
  char *stack;                    // NULL until started
  void *sp;
  void *fake_stack;               // ASan's fake stack while switched out
  const void *wait_pc;            // where it waits (reports)
  Block *block;
};

struct Warp {
  int size;                       // lanes that exist (the last warp may be partial)
  bool pending;
  WarpOp op;
  unsigned mask, arrived;
  const void *pc;
  int arg, width;
  uint64_t val[32], res[32];
  // completed collectives (the race detector's warp-level happens-before):
  // seq counts them, hist[seq % kHist] is the mask of the one numbered seq
  uint32_t seq;
  static constexpr int kHist = 32;
  unsigned hist[kHist];
};

struct SharedVar { const void *tag; size_t off, size; const char *name; };

struct Block {
  uint3 bid;
  int nthreads, alive, arrived;
  std::vector<Thread> threads;
  std::vector<Warp> warps;
  std::vector<SharedVar> vars;    // vars[0]: the dynamic part (tag NULL)
  size_t smem_used;               // bytes of the arena in use
  uint32_t epoch;                 // barrier interval (race detector)
};

struct Launch {
  const Site *site;
  Config cfg;
  void (*body)(void *);
  void *ctx;
  uintptr_t ctx_lo, ctx_hi;
  size_t smem_limit;              // dynamic + static may not exceed it
  bool aborted;                   // a fatal fault: stop running blocks
  int races;                      // hazards reported in this launch
  std::set<std::pair<const void *, const void *>> race_sites;
};

// Per OS thread: the scheduler context, a stack pool, the shared arena and its shadow.
// Per byte of shared memory, for the current barrier interval (epoch): the
// last writer and the readers since, with the warp's collective count at the
// time (an access is ordered before a later one of another lane of the same
// warp when a collective whose mask holds both completed in between).
struct Shadow {
  uint32_t epoch, wseq, rseq;     // rseq: the first reader's
  int16_t writer, reader;         // -1 none; reader -2: several
  int16_t rwarp;                  // warp of every reader, -1 when they span warps
  unsigned rmask;                 // lanes (of rwarp) that read
  const void *wpc, *rpc;
};
struct Worker {
  void *sched_sp;
  void *sched_fake;
  const void *sched_bottom;
  size_t sched_size;
  std::vector<char *> free_stacks;
  char *smem;                     // kSmemOptin + kSmemSlack bytes
  Shadow *shadow;                 // one per byte of smem (race detector), or NULL
  uint32_t epoch;
  Thread *cur;                    // the running emulated thread, or NULL (not in a kernel)
  Launch *launch;
  Block *block;
  char *exited_stack;             // stack of a thread that just ended, released by the scheduler
  uintptr_t cache_lo, cache_hi;   // last device range an access hit
  unsigned cache_gen;
};
static thread_local Worker *worker __attribute__((tls_model("initial-exec")));   // one pointer of static TLS: cheap to reach

// A host thread's worker (its shared-memory arena, shadow and fiber stacks) is
// freed when the thread ends: a thread that launched kernels (the reducer's
// communication thread, a test's helper thread) must not leak them.
struct WorkerReaper {
  bool armed = false;
  ~WorkerReaper() {
    Worker *w = worker;
    if (!w) return;
    worker = nullptr;
    for (char *st : w->free_stacks) munmap(st, kStackSize);
    free(w->smem);
    free(w->shadow);
    delete w;
  }
};
static thread_local WorkerReaper reaper;

static Worker *get_worker(void) {
  if (!worker) {
    reaper.armed = true;   // constructs this thread's reaper, whose destructor frees the worker
    worker = new Worker();
    void *m = nullptr;
    if (posix_memalign(&m, 4096, kSmemOptin + kSmemSlack)) m = nullptr;
    worker->smem = (char *)m;
    if (!worker->smem) { fprintf(stderr, "nabla-emu: out of memory for the shared-memory arena\n"); abort(); }
  }
  return worker;
}

static char *new_stack(Worker *w) {
  if (!w->free_stacks.empty()) { char *s = w->free_stacks.back(); w->free_stacks.pop_back(); return s; }
  char *s = (char *)mmap(nullptr, kStackSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (s == MAP_FAILED) { fprintf(stderr, "nabla-emu: cannot map a thread stack\n"); abort(); }
  mprotect(s, 4096, PROT_NONE);                            // guard page: an overflow faults
  return s;
}
static void release_stack(Worker *w, char *s) {
#ifdef EMU_ASAN
  ASAN_UNPOISON_MEMORY_REGION(s + 4096, kStackSize - 4096);
#endif
  w->free_stacks.push_back(s);
}

[[noreturn]] static void fiber_entry(void);
static void thread_exit(Thread *t);

static void switch_to(Worker *w, Thread *t) {
  w->cur = t;
  if (t->state == NOT_STARTED) {
    t->stack = new_stack(w);
    char *top = t->stack + kStackSize;
    void **sp = (void **)top;
    *--sp = nullptr;                                       // fiber_entry's "return address"
    *--sp = (void *)fiber_entry;                           // emu_switch returns here
    for (int i = 0; i < 6; i++) *--sp = nullptr;           // rbp rbx r12-r15
    --sp;
    unsigned mxcsr, fpcw = 0;
    asm volatile("stmxcsr %0" : "=m"(mxcsr));
    asm volatile("fnstcw %0" : "=m"(fpcw));
    memcpy(sp, &mxcsr, 4);
    memcpy((char *)sp + 4, &fpcw, 4);
    t->sp = sp;
  }
  t->state = RUNNABLE;
#ifdef EMU_ASAN
  __sanitizer_start_switch_fiber(&w->sched_fake, t->stack + 4096, kStackSize - 4096);
#endif
  emu_switch(&w->sched_sp, t->sp);
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(w->sched_fake, nullptr, nullptr);
#endif
  w->cur = nullptr;
  if (w->exited_stack) { release_stack(w, w->exited_stack); w->exited_stack = nullptr; }
}

// From an emulated thread back to the scheduler; returns when it is switched in again.
static void to_scheduler(Worker *w, Thread *t, bool forever) {
#ifdef EMU_ASAN
  __sanitizer_start_switch_fiber(forever ? nullptr : &t->fake_stack, w->sched_bottom, w->sched_size);
#endif
  emu_switch(&t->sp, w->sched_sp);
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(t->fake_stack, &w->sched_bottom, &w->sched_size);
#endif
  (void)forever;
}

[[noreturn]] static void fiber_entry(void) {
  Worker *w = worker;
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &w->sched_bottom, &w->sched_size);
#endif
  w->launch->body(w->launch->ctx);
  thread_exit(w->cur);
  __builtin_unreachable();
}

// ---- faults inside a kernel ------------------------------------------------------------------------------
static std::string thread_name(const Thread *t) {
  char buf[160];
  snprintf(buf, sizeof buf, "thread (%u,%u,%u) of block (%u,%u,%u)", t->tid.x, t->tid.y, t->tid.z, t->block->bid.x,
           t->block->bid.y, t->block->bid.z);
  return buf;
}

// Reports a fatal fault of the running kernel and abandons the launch: the
// current thread never runs again (the scheduler sees launch->aborted).  Its
// frames are abandoned, never unwound: callers pass plain text (no object
// that owns memory may live in them, or LeakSanitizer reports it).
[[noreturn]] static void kernel_fault(cudaError_t e, const char *what) {
  Worker *w = worker;
  Launch *L = w->launch;
  {
    char head[600];
    snprintf(head, sizeof head, "kernel %s (launched at %s:%d): ", L->site->kernel, relative(L->site->file).c_str(), L->site->line);
    std::string text = std::string(head) + what;
    report("%s", text.c_str());
    set_fault(e, text);
  }
  L->aborted = true;
  Thread *t = w->cur;
  t->state = DONE;
  w->exited_stack = t->stack;
  to_scheduler(w, t, true);
  __builtin_unreachable();
}

static std::string at(const void *pc) { return " at " + where(pc); }

// ---- the scheduler ---------------------------------------------------------------------------------------
static void complete_barrier(Block *b) {
  b->arrived = 0;
  for (Thread &t : b->threads)
    if (t.state == WAIT_BARRIER) t.state = RUNNABLE;
  b->epoch = ++worker->epoch;
}

static void fail_pending_collective(Warp &wp, int lane, const char *why) {
  Thread *t = worker->cur;
  char buf[400];
  snprintf(buf, sizeof buf, "lane %d of warp %d %s while lanes 0x%08x wait in a warp collective with mask 0x%08x%s", lane,
           t->warp, why, wp.arrived, wp.mask, at(wp.pc).c_str());
  kernel_fault(cudaErrorLaunchFailure, buf);
}

static void thread_exit(Thread *t) {
  Block *b = t->block;
  Worker *w = worker;
  t->state = DONE;
  b->alive--;
  Warp &wp = b->warps[t->warp];
  if (wp.pending && (wp.mask >> t->lane & 1)) fail_pending_collective(wp, t->lane, "exited");
  if (b->arrived > 0 && b->arrived == b->alive) complete_barrier(b);
  w->exited_stack = t->stack;
  to_scheduler(w, t, true);
}

static std::string deadlock_text(Block *b) {
  std::string s = "deadlock: no thread of block can run;";
  int shown = 0;
  for (Thread &t : b->threads) {
    if (t.state != WAIT_BARRIER && t.state != WAIT_WARP) continue;
    if (shown++ == 4) { s += " ..."; break; }
    s += " thread " + std::to_string(t.linear) + (t.state == WAIT_BARRIER ? " waits in __syncthreads" : " waits in a warp collective") +
         at(t.wait_pc) + ";";
  }
  return s;
}

static void run_block(Worker *w, Launch *L, Block *b) {
  w->block = b;
  b->epoch = ++w->epoch;
  for (;;) {
    bool progress = false, left = false;
    for (Thread &t : b->threads) {
      if (L->aborted) break;
      if (t.state == NOT_STARTED || t.state == RUNNABLE) { switch_to(w, &t); progress = true; }
      if (t.state != DONE) left = true;
    }
    if (L->aborted) break;
    if (!left) return;
    if (!progress) {
      char head[600];
      snprintf(head, sizeof head, "kernel %s (launched at %s:%d), block (%u,%u,%u): ", L->site->kernel, relative(L->site->file).c_str(),
               L->site->line, b->bid.x, b->bid.y, b->bid.z);
      std::string text = head + deadlock_text(b);
      report("%s", text.c_str());
      set_fault(cudaErrorLaunchFailure, text);
      L->aborted = true;
      break;
    }
  }
  // an aborted block: its started threads are abandoned mid-flight
  for (Thread &t : b->threads)
    if (t.stack && t.state != DONE) release_stack(w, t.stack);
}

static void setup_block(Block *b, const Config &c, uint3 bid) {
  const int n = (int)(c.block.x * c.block.y * c.block.z);
  b->bid = bid;
  b->nthreads = b->alive = n;
  b->arrived = 0;
  b->threads.assign(n, Thread());
  for (int i = 0; i < n; i++) {
    Thread &t = b->threads[i];
    t.tid = make_uint3(i % c.block.x, (i / c.block.x) % c.block.y, i / (c.block.x * c.block.y));
    t.linear = i; t.lane = i & 31; t.warp = i >> 5;
    t.state = NOT_STARTED; t.stack = nullptr; t.block = b; t.fake_stack = nullptr; t.wait_pc = nullptr;
  }
  b->warps.assign((n + 31) / 32, Warp());
  for (size_t k = 0; k < b->warps.size(); k++) b->warps[k].size = (int)(n - 32 * k < 32 ? n - 32 * k : 32);
  b->vars.clear();
  b->vars.push_back(SharedVar{ nullptr, 0, c.smem, "dynamic shared memory" });
  b->smem_used = (c.smem + 15) & ~(size_t)15;
}

std::unordered_map<const void *, size_t> &smem_optin = *new std::unordered_map<const void *, size_t>;
static char stream_object;
cudaStream_t the_stream(void) { return (cudaStream_t)&stream_object; }   // the one stream handle given out

static cudaError_t check_config(const Config &c, const void *kernel_id) {
  const dim3 g = c.grid, b = c.block;
  if (!g.x || !g.y || !g.z || !b.x || !b.y || !b.z) return cudaErrorInvalidConfiguration;
  if (b.x > 1024 || b.y > 1024 || b.z > 64 || (size_t)b.x * b.y * b.z > (size_t)kMaxThreadsPerBlock) return cudaErrorInvalidConfiguration;
  if (g.x > 2147483647u || g.y > 65535 || g.z > 65535) return cudaErrorInvalidConfiguration;
  size_t limit = kSmemDefault;
  { std::lock_guard<std::mutex> lk(mu); auto it = smem_optin.find(kernel_id); if (it != smem_optin.end()) limit = it->second; }
  if (c.smem > limit) return cudaErrorInvalidValue;
  if ((uintptr_t)c.stream > 2 && !stream_known(c.stream)) return cudaErrorInvalidResourceHandle;
  return cudaSuccess;
}


void run_launch(const Site &site, const Config &cfg, const void *kernel_id, void (*body)(void *), void *ctx, size_t ctx_size) {
  cudaError_t e = check_config(cfg, kernel_id);
  if (e != cudaSuccess) {
    report("kernel %s (launched at %s:%d): launch rejected: %s (grid %u,%u,%u, block %u,%u,%u, %zu bytes of dynamic shared memory)",
           site.kernel, relative(site.file).c_str(), site.line, cudaGetErrorString(e), cfg.grid.x, cfg.grid.y, cfg.grid.z, cfg.block.x, cfg.block.y,
           cfg.block.z, cfg.smem);
    fail(e);
    return;
  }
  Worker *w = get_worker();
  if (w->cur) { fail(cudaErrorNotSupported); return; }    // a launch from inside a kernel (dynamic parallelism)
  if (racecheck_on() && !w->shadow) w->shadow = (Shadow *)calloc(kSmemOptin + kSmemSlack, sizeof(Shadow));
  Launch L{ nullptr, cfg };
  L.site = &site;
  L.cfg = cfg;
  L.body = body;
  L.ctx = ctx;
  L.ctx_lo = (uintptr_t)ctx;
  L.ctx_hi = (uintptr_t)ctx + ctx_size;
  size_t optin = kSmemDefault;
  { std::lock_guard<std::mutex> lk(mu); auto it = smem_optin.find(kernel_id); if (it != smem_optin.end()) optin = it->second; }
  L.smem_limit = optin > kSmemDefault ? optin : kSmemDefault;
  if (capture_launch(site, cfg, kernel_id, body, ctx, ctx_size)) return;   // recorded into a graph (api.cpp), not run
  stream_note_write(cfg.stream);                           // api.cpp's ordering checker: a kernel may write anything
  Launch *outer = w->launch;
  w->launch = &L;
  Block b;
  for (unsigned z = 0; z < cfg.grid.z && !L.aborted; z++)
    for (unsigned y = 0; y < cfg.grid.y && !L.aborted; y++)
      for (unsigned x = 0; x < cfg.grid.x && !L.aborted; x++) {
        setup_block(&b, cfg, make_uint3(x, y, z));
        run_block(w, &L, &b);
      }
  w->launch = outer;
  w->block = nullptr;
}

// ---- built-in variables ------------------------------------------------------------------------------------
uint3 thread_idx(void) { return worker->cur->tid; }
uint3 block_idx(void) { return worker->block->bid; }
dim3 block_dim(void) { return worker->launch->cfg.block; }
dim3 grid_dim(void) { return worker->launch->cfg.grid; }

// ---- shared memory -------------------------------------------------------------------------------------------
void *shared_alloc(const void *tag, size_t size, size_t align, const char *name) {
  Worker *w = worker;
  Block *b = w->block;
  for (const SharedVar &v : b->vars)
    if (v.tag == tag) return w->smem + v.off;
  if (align < 16) align = 16;
  size_t off = (b->smem_used + align - 1) & ~(align - 1);
  if (off + size > w->launch->smem_limit) {
    char buf[300];
    snprintf(buf, sizeof buf, "too many resources requested for launch: __shared__ %s (%zu bytes) brings the block to %zu bytes of shared memory, over the %zu allowed",
             name, size, off + size, w->launch->smem_limit);
    kernel_fault(cudaErrorLaunchOutOfResources, buf);
  }
  b->vars.push_back(SharedVar{ tag, off, size, name });
  b->smem_used = off + size;
  return w->smem + off;
}

void *shared_dynamic(size_t align, const char *name) {
  (void)align; (void)name;
  return worker->smem;                                     // vars[0], at offset 0 (16-byte aligned arena)
}

// ---- the access checker (called by the instrumented module code) ---------------------------------------------
// a collective with every lane of `lanes` completed in warp wp after its count was `since`
static bool warp_synced(const Warp &wp, uint32_t since, unsigned lanes) {
  for (uint32_t q = wp.seq; q > since && wp.seq - q < (uint32_t)Warp::kHist; q--)
    if ((wp.hist[q % Warp::kHist] & lanes) == lanes) return true;
  return false;
}

// thread p's access when its warp had completed p_seq collectives happens before t's current one
static bool ordered(Block *b, int p, uint32_t p_seq, const Thread *t) {
  if (p == t->linear) return true;
  if (p >> 5 != t->warp) return false;
  return warp_synced(b->warps[t->warp], p_seq, 1u << (p & 31) | 1u << t->lane);
}

static void race_report(Worker *w, Thread *t, size_t off, const char *kind, int other, const void *opc, bool first_wrote, bool write,
                        const void *pc) {
  Block *b = t->block;
  Launch *L = w->launch;
  if (!L->race_sites.insert({ opc, pc }).second) return;  // once per pair of lines and launch
  L->races++;
  const char *var = "?";
  size_t voff = off;
  for (const SharedVar &v : b->vars)
    if (off >= v.off && off < v.off + v.size) { var = v.name; voff = off - v.off; }
  std::string first = other >= 0 ? "thread " + std::to_string(other) : std::string("another thread");
  first += (first_wrote ? " wrote" : " read") + at(opc);
  std::string then = "thread " + std::to_string(t->linear) + (write ? " wrote" : " read") + at(pc);
  char buf[1600];
  snprintf(buf, sizeof buf,
           "kernel %s (launched at %s:%d): shared-memory race (%s hazard) on __shared__ %s, byte %zu, block (%u,%u,%u), "
           "within one barrier interval: %s, then %s",
           L->site->kernel, relative(L->site->file).c_str(), L->site->line, kind, var, voff, b->bid.x, b->bid.y, b->bid.z, first.c_str(), then.c_str());
  report("%s", buf);
  set_fault(cudaErrorLaunchFailure, buf);
}

static void race_check(Worker *w, Thread *t, size_t off, unsigned n, bool write, const void *pc) {
  Block *b = t->block;
  const uint32_t seq = b->warps[t->warp].seq;
  const unsigned lane_bit = 1u << t->lane;
  for (unsigned i = 0; i < n; i++) {
    Shadow &s = w->shadow[off + i];
    if (s.epoch != b->epoch) {                             // first access of this interval
      s.epoch = b->epoch;
      s.writer = -1; s.reader = -1;
    }
    if (s.writer >= 0 && !ordered(b, s.writer, s.wseq, t)) {
      race_report(w, t, off + i, write ? "write-after-write" : "read-after-write", s.writer, s.wpc, true, write, pc);
      return;
    }
    if (!write) {
      if (s.reader == -1) { s.reader = (int16_t)t->linear; s.rseq = seq; s.rwarp = (int16_t)t->warp; s.rmask = lane_bit; s.rpc = pc; }
      else if (s.reader != t->linear) {
        s.reader = -2;
        if (s.rwarp != t->warp) s.rwarp = -1;
        else s.rmask |= lane_bit;
      }
      continue;
    }
    bool war = false;
    if (s.reader >= 0) war = !ordered(b, s.reader, s.rseq, t);
    else if (s.reader == -2)
      war = s.rwarp != t->warp || !warp_synced(b->warps[t->warp], s.rseq, s.rmask | lane_bit);
    if (war) {
      race_report(w, t, off + i, "write-after-read", s.reader, s.rpc, false, write, pc);
      return;
    }
    s.writer = (int16_t)t->linear; s.wseq = seq; s.wpc = pc;
    s.reader = -1;                                         // earlier reads are ordered before this write
  }
}

static void on_access(void *addr, unsigned n, bool write, const void *pc) {
  Worker *w = worker;
  if (!w || !w->cur) return;                               // host code of the module
  Thread *t = w->cur;
  uintptr_t a = (uintptr_t)addr;
  if (a - (uintptr_t)t->stack < kStackSize) return;        // its own stack
  Launch *L = w->launch;
  if (a >= L->ctx_lo && a + n <= L->ctx_hi) return;        // the launch's arguments
  uintptr_t sm = (uintptr_t)w->smem;
  if (a - sm < kSmemOptin + kSmemSlack) {
    size_t off = a - sm;
    for (const SharedVar &v : t->block->vars)
      if (off >= v.off && off + n <= v.off + v.size) {
        if (w->shadow) race_check(w, t, off, n, write, pc);
        return;
      }
    char buf[500];
    snprintf(buf, sizeof buf, "invalid __shared__ %s of %u bytes at offset %zu (the block has %zu bytes of shared memory in use) by %s%s",
             write ? "write" : "read", n, off, t->block->smem_used, thread_name(t).c_str(), at(pc).c_str());
    kernel_fault(cudaErrorIllegalAddress, buf);
  }
  if (a >= w->cache_lo && a + n <= w->cache_hi && w->cache_gen == map_gen.load(std::memory_order_relaxed)) return;
  {
    std::lock_guard<std::mutex> g(mu);
    uintptr_t lo, hi;
    if (find_valid(a, n, &lo, &hi)) { w->cache_lo = lo; w->cache_hi = hi; w->cache_gen = map_gen.load(); return; }
  }
  // the module's own image (constants the compiler placed in memory)
  Dl_info info;
  void *self = (void *)&on_access;
  Dl_info mine;
  if (dladdr(addr, &info) && dladdr(self, &mine) && info.dli_fbase == mine.dli_fbase) return;
  char buf[700];
  snprintf(buf, sizeof buf, "invalid global %s of %u bytes at %p (%s) by %s%s", write ? "write" : "read", n, addr,
           describe_address(a).c_str(), thread_name(t).c_str(), at(pc).c_str());
  kernel_fault(cudaErrorIllegalAddress, buf);
}

// atomics check their address like any access (they are not race hazards)
static void atomic_access(void *p, unsigned n, const void *pc) {
  Worker *w = worker;
  if (!w || !w->cur) return;
  if ((uintptr_t)p % n) {
    char buf[600];
    snprintf(buf, sizeof buf, "misaligned %u-byte atomic at %p%s", n, p, at(pc).c_str());
    kernel_fault(cudaErrorMisalignedAddress, buf);
  }
  Shadow *sh = w->shadow;
  w->shadow = nullptr;                                     // no hazard tracking for atomics
  on_access(p, n, true, pc);
  w->shadow = sh;
}

}  // namespace emu

#define RA __builtin_return_address(0)
#define HOOK(n) \
  EXPORT void __sanitizer_cov_load##n(void *a) { emu::on_access(a, n, false, RA); } \
  EXPORT void __sanitizer_cov_store##n(void *a) { emu::on_access(a, n, true, RA); }
HOOK(1) HOOK(2) HOOK(4) HOOK(8) HOOK(16)
#undef HOOK

namespace emu {

// ---- barriers and warp collectives --------------------------------------------------------------------------------
void syncthreads(void) {
  Worker *w = worker;
  Thread *t = w->cur;
  if (!t) return;
  Block *b = t->block;
  t->wait_pc = RA;
  Warp &wp = b->warps[t->warp];
  if (wp.pending && (wp.mask >> t->lane & 1)) {
    char buf[900];
    snprintf(buf, sizeof buf, "lane %d of warp %d reached __syncthreads%s while its warp waits for it in a collective%s", t->lane,
             t->warp, at(RA).c_str(), at(wp.pc).c_str());
    kernel_fault(cudaErrorLaunchFailure, buf);
  }
  if (++b->arrived == b->alive) { complete_barrier(b); return; }
  t->state = WAIT_BARRIER;
  to_scheduler(w, t, false);
}

static uint64_t lane_result(const Warp &wp, int lane) {
  const uint64_t poison = ~(uint64_t)0;                    // the value of an inactive source lane: all ones (NaN, -1)
  int w = wp.width, seg = lane & ~(w - 1), src = lane;
  switch (wp.op) {
    case SHFL_IDX: src = seg + (((wp.arg % w) + w) % w); break;
    case SHFL_UP: src = lane - wp.arg; if (src < seg) return wp.val[lane]; break;
    case SHFL_DOWN: src = lane + wp.arg; if (src >= seg + w) return wp.val[lane]; break;
    case SHFL_XOR: src = lane ^ wp.arg; if (src < seg || src >= seg + w) return wp.val[lane]; break;
    case VOTE_BALLOT: case VOTE_ANY: case VOTE_ALL: {
      unsigned bits = 0;
      for (int l = 0; l < 32; l++) if ((wp.mask >> l & 1) && wp.val[l]) bits |= 1u << l;
      return wp.op == VOTE_BALLOT ? bits : wp.op == VOTE_ANY ? bits != 0 : bits == wp.mask;
    }
    case SYNC_WARP: return 0;
  }
  return (wp.mask >> src & 1) ? wp.val[src] : poison;
}

static const char *op_name(WarpOp op) {
  static const char *names[] = { "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync", "__ballot_sync",
                                 "__any_sync", "__all_sync", "__syncwarp" };
  return names[op];
}

uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t value, int arg, int width) {
  Worker *w = worker;
  Thread *t = w->cur;
  const void *pc = RA;
  if (!t) return value;
  Block *b = t->block;
  Warp &wp = b->warps[t->warp];
  char buf[700];
  if (!(mask >> t->lane & 1)) {
    snprintf(buf, sizeof buf, "%s by lane %d of warp %d, which is not in its mask 0x%08x (by %s)%s", op_name(op), t->lane, t->warp,
             mask, thread_name(t).c_str(), at(pc).c_str());
    kernel_fault(cudaErrorLaunchFailure, buf);
  }
  if (width < 1 || width > 32 || (width & (width - 1))) {
    snprintf(buf, sizeof buf, "%s with width %d (a power of two up to 32)%s", op_name(op), width, at(pc).c_str());
    kernel_fault(cudaErrorLaunchFailure, buf);
  }
  const unsigned exist = wp.size == 32 ? 0xffffffffu : (1u << wp.size) - 1;
  if (mask & ~exist) {
    snprintf(buf, sizeof buf, "%s with mask 0x%08x in warp %d, which has only %d threads (lanes 0x%08x do not exist: block of %d threads)%s",
             op_name(op), mask, t->warp, wp.size, mask & ~exist, b->nthreads, at(pc).c_str());
    kernel_fault(cudaErrorLaunchFailure, buf);
  }
  for (int l = 0; l < 32; l++)
    if ((mask >> l & 1) && b->threads[t->warp * 32 + l].state == DONE) {
      snprintf(buf, sizeof buf, "%s with mask 0x%08x in warp %d, but lane %d has exited%s", op_name(op), mask, t->warp, l, at(pc).c_str());
      kernel_fault(cudaErrorLaunchFailure, buf);
    }
  if (wp.pending) {
    if (wp.mask != mask || wp.op != op || wp.arg != arg || wp.width != width) {
      snprintf(buf, sizeof buf, "lanes of warp %d disagree: lane %d calls %s (mask 0x%08x)%s while lanes 0x%08x wait in %s (mask 0x%08x)%s",
               t->warp, t->lane, op_name(op), mask, at(pc).c_str(), wp.arrived, op_name(wp.op), wp.mask, at(wp.pc).c_str());
      kernel_fault(cudaErrorLaunchFailure, buf);
    }
  } else {
    wp.pending = true; wp.op = op; wp.mask = mask; wp.arrived = 0; wp.pc = pc; wp.arg = arg; wp.width = width;
  }
  wp.val[t->lane] = value;
  wp.arrived |= 1u << t->lane;
  if (wp.arrived == mask) {
    for (int l = 0; l < 32; l++) if (mask >> l & 1) wp.res[l] = lane_result(wp, l);
    wp.pending = false;
    wp.seq++;
    wp.hist[wp.seq % Warp::kHist] = mask;
    for (int l = 0; l < 32; l++)
      if ((mask >> l & 1) && l != t->lane) b->threads[t->warp * 32 + l].state = RUNNABLE;
    return wp.res[t->lane];
  }
  t->state = WAIT_WARP;
  t->wait_pc = pc;
  to_scheduler(w, t, false);
  return wp.res[t->lane];
}

unsigned active_mask(void) {
  Thread *t = worker ? worker->cur : nullptr;
  if (!t) return 0;
  unsigned m = 0;
  Block *b = t->block;
  for (int l = 0; l < b->warps[t->warp].size; l++)
    if (b->threads[t->warp * 32 + l].state != DONE) m |= 1u << l;
  return m;
}

// ---- atomics ----------------------------------------------------------------------------------------------------
template <typename T> static T fetch_add(T *p, T v) {
  T old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(p, &old, (T)(old + v), false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
  return old;
}
static float fadd(float *p, float v) {
  unsigned *u = (unsigned *)p, old = __atomic_load_n(u, __ATOMIC_RELAXED), nu;
  float f;
  do { memcpy(&f, &old, 4); f += v; memcpy(&nu, &f, 4); } while (!__atomic_compare_exchange_n(u, &old, nu, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  memcpy(&f, &old, 4);
  return f;
}
template <typename H> static H hadd(H *p, H v) {
  unsigned short *u = (unsigned short *)p, old = __atomic_load_n(u, __ATOMIC_RELAXED), nu;
  H h;
  do { memcpy(&h, &old, 2); h = (H)((float)h + (float)v); memcpy(&nu, &h, 2); } while (!__atomic_compare_exchange_n(u, &old, nu, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  memcpy(&h, &old, 2);
  return h;
}
static double dadd(double *p, double v) {
  unsigned long long *u = (unsigned long long *)p, old = __atomic_load_n(u, __ATOMIC_RELAXED), nu;
  double f;
  do { memcpy(&f, &old, 8); f += v; memcpy(&nu, &f, 8); } while (!__atomic_compare_exchange_n(u, &old, nu, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  memcpy(&f, &old, 8);
  return f;
}
template <typename T> static T cas(T *p, T c, T v) { __atomic_compare_exchange_n(p, &c, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED); return c; }

float atomic_add_f32(float *p, float v) { atomic_access(p, 4, RA); return fadd(p, v); }
double atomic_add_f64(double *p, double v) { atomic_access(p, 8, RA); return dadd(p, v); }
__half atomic_add_f16(__half *p, __half v) { atomic_access(p, 2, RA); return hadd(p, v); }
__nv_bfloat16 atomic_add_bf16(__nv_bfloat16 *p, __nv_bfloat16 v) { atomic_access(p, 2, RA); return hadd(p, v); }
int atomic_add_i32(int *p, int v) { atomic_access(p, 4, RA); return (int)fetch_add((unsigned *)p, (unsigned)v); }
unsigned atomic_add_u32(unsigned *p, unsigned v) { atomic_access(p, 4, RA); return fetch_add(p, v); }
unsigned long long atomic_add_u64(unsigned long long *p, unsigned long long v) { atomic_access(p, 8, RA); return fetch_add(p, v); }
int atomic_cas_i32(int *p, int c, int v) { atomic_access(p, 4, RA); return cas(p, c, v); }
unsigned atomic_cas_u32(unsigned *p, unsigned c, unsigned v) { atomic_access(p, 4, RA); return cas(p, c, v); }
unsigned long long atomic_cas_u64(unsigned long long *p, unsigned long long c, unsigned long long v) { atomic_access(p, 8, RA); return cas(p, c, v); }
int atomic_max_i32(int *p, int v) { atomic_access(p, 4, RA); return __atomic_fetch_max(p, v, __ATOMIC_RELAXED); }
int atomic_min_i32(int *p, int v) { atomic_access(p, 4, RA); return __atomic_fetch_min(p, v, __ATOMIC_RELAXED); }
int atomic_exch_i32(int *p, int v) { atomic_access(p, 4, RA); return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); }
void thread_fence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

}  // namespace emu
