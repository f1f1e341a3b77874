// allocator.cu — caching device allocator (the scheme of PyTorch's
// CUDACachingAllocator, reduced to one device).
//
// cudaMalloc/cudaFree are slow (and cudaFree synchronises the device), so
// memory is requested from the driver in SEGMENTS and carved into BLOCKS:
//   * sizes are rounded up to 512 bytes;
//   * small requests (<= 1 MiB) come from 2 MiB segments, large ones from
//     20 MiB segments (< 10 MiB) or a segment of their own rounded to 2 MiB;
//   * a free block is found best-fit (smallest size >= request) in the pool's
//     free set and SPLIT when the rest is worth keeping (small: >= 512 B,
//     large: > 1 MiB); freed blocks MERGE with free neighbours of the same segment;
//   * blocks are stream-aware: a free block is reused only by requests on the
//     stream it was last used on, so reuse is ordered after the previous
//     user's kernels without events.  (The module computes on one stream; NCCL's
//     streams only read and write buffers whose release the compute stream is
//     ordered after by an event, nccl.cu; the
//     field keeps the invariant when more streams come.)
// Out of memory: a failed cudaMalloc returns every fully-free cached segment
// to the driver and retries once; then the request fails with
//   "CUDA out of memory: tried to allocate 1.50 GiB (GPU: 0.20 GiB free of
//    79.10 GiB total; nabla: 70.00 GiB allocated, 75.00 GiB cached)"
// and everything keeps working (the caller gets NULL).
// No C++ exception leaves dev_alloc/dev_free: the containers and `new Block`
// may throw std::bad_alloc (host memory), which becomes an error + NULL here
// (a segment obtained just before is given back), never an abort in C code.
#include "common.cuh"
#include "cuda/graph.h"
#include <set>
#include <vector>
#include <unordered_map>
#include <mutex>
#include <stdio.h>

namespace ncu {

namespace {

constexpr size_t kRound = 512;
constexpr size_t kSmallSize = 1 << 20;         // <= this: small pool
constexpr size_t kSmallSegment = 2 << 20;
constexpr size_t kLargeSegment = 20 << 20;
constexpr size_t kMinLargeAlone = 10 << 20;    // >= this: own segment
constexpr size_t kRoundLarge = 2 << 20;

struct Block {
  char *ptr;
  size_t size;
  cudaStream_t stream;
  bool allocated, small;
  Block *prev, *next;                          // neighbours inside the segment
};

// l takes over r, its right neighbour in the segment, which is deleted.
// Neither may be in a pool while this runs: the pools are ordered by size.
inline void absorb(Block *l, Block *r) {
  l->size += r->size;
  l->next = r->next;
  if (r->next) r->next->prev = l;
  delete r;
}

struct BlockLess {
  bool operator()(const Block *a, const Block *b) const {
    if (a->stream != b->stream) return (uintptr_t)a->stream < (uintptr_t)b->stream;
    if (a->size != b->size) return a->size < b->size;
    return (uintptr_t)a->ptr < (uintptr_t)b->ptr;
  }
};

// Heap-allocated and never destroyed: tensors may be released by the host's
// atexit handlers after this module's static destructors have run.
std::mutex &mu = *new std::mutex;
std::set<Block *, BlockLess> &free_small = *new std::set<Block *, BlockLess>;
std::set<Block *, BlockLess> &free_large = *new std::set<Block *, BlockLess>;
std::unordered_map<void *, Block *> &live = *new std::unordered_map<void *, Block *>;
size_t allocated_bytes, cached_bytes, peak_bytes;

size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

std::set<Block *, BlockLess> &pool_of(bool small) { return small ? free_small : free_large; }

// Frees every cached segment that is entirely free.  Caller holds mu.
void release_free_segments(void) {
  for (auto *pool : { &free_small, &free_large }) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block *b = *it;
      if (!b->prev && !b->next) {
        cudaError_t e = cudaFree(b->ptr);
        count(C_FREES);
        count(C_SYNCS);                              // cudaFree waits for the device
        if (e != cudaSuccess) cudaGetLastError();   // keep going; the block is dropped either way
        cached_bytes -= b->size;
        delete b;
        it = pool->erase(it);
      } else ++it;
    }
  }
}

void format_size(char *buf, size_t n, size_t bytes) {
  if (bytes >= (1ull << 30)) snprintf(buf, n, "%.2f GiB", (double)bytes / (1ull << 30));
  else if (bytes >= (1ull << 20)) snprintf(buf, n, "%.2f MiB", (double)bytes / (1ull << 20));
  else snprintf(buf, n, "%zu bytes", bytes);
}

// cudaMalloc of a segment; while a graph is captured the thread's capture
// mode is relaxed around it (a segment of the private pool is not stream work)
cudaError_t segment_malloc(void **p, size_t n) {
  if (!capture_active) return cudaMalloc(p, n);
  cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&m);
  cudaError_t e = cudaMalloc(p, n);
  cudaThreadExchangeStreamCaptureMode(&m);
  return e;
}

}  // namespace

#ifdef NABLA_CUDA_EMU
extern "C" void emu_forget_blocks_in(void *p, size_t n);   // cuda/emu/runtime.cpp
#endif

void pool_release(uintptr_t tag) {
  std::lock_guard<std::mutex> lock(mu);
  cudaStream_t t = (cudaStream_t)tag;
  for (auto *pool : { &free_small, &free_large }) {
    std::vector<Block *> mine;
    for (Block *b : *pool) if (b->stream == t) mine.push_back(b);
    for (Block *b : mine) {
      pool->erase(b);
      b->stream = stream;
#ifdef NABLA_CUDA_EMU
      emu_forget_blocks_in(b->ptr, b->size);   // notes a replay left for blocks now free
#endif
      pool->insert(b);
    }
  }
  for (auto &kv : live) if (kv.second->stream == t) kv.second->stream = stream;
}

bool pool_owns(const void *p, uintptr_t tag) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = live.find((void *)p);
  return it != live.end() && it->second->stream == (cudaStream_t)tag;
}

int alloc_init(void) { return 0; }

static void *dev_alloc_unguarded(size_t request) {
  count(C_ALLOC_REQUESTS);
  size_t size = round_up(request ? request : 1, kRound);
  bool small = size <= kSmallSize;
  std::lock_guard<std::mutex> lock(mu);
  auto &pool = pool_of(small);
  // a graph being captured allocates from its private pool (graph.h): the
  // tag stands where the stream would
  cudaStream_t tag = capture_pool_tag ? (cudaStream_t)capture_pool_tag : stream;
  Block key{nullptr, size, tag, false, small, nullptr, nullptr};
  auto it = pool.lower_bound(&key);
  Block *b = nullptr;
  if (it != pool.end() && (*it)->stream == tag) {
    b = *it;
    pool.erase(it);
  } else {
    size_t seg = small ? kSmallSegment : size < kMinLargeAlone ? kLargeSegment : round_up(size, kRoundLarge);
    void *p = nullptr;
    cudaError_t e = segment_malloc(&p, seg);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      // cudaFree cannot be captured: a capture ends here (its work runs now)
      if (capture_gate("an allocation that needed cached memory freed (cudaFree) first")) return nullptr;
      release_free_segments();             // give the cache back and try once more
      e = segment_malloc(&p, seg);
    }
    if (e == cudaSuccess) count(C_MALLOCS);
    if (e != cudaSuccess) {
      cudaGetLastError();
      size_t fr = 0, tot = 0;
      cudaMemGetInfo(&fr, &tot);
      cudaGetLastError();
      char s1[32], s2[32], s3[32], s4[32], s5[32];
      format_size(s1, sizeof s1, request); format_size(s2, sizeof s2, fr); format_size(s3, sizeof s3, tot);
      format_size(s4, sizeof s4, allocated_bytes); format_size(s5, sizeof s5, cached_bytes);
      if (e == cudaErrorMemoryAllocation)
        host->error_set("CUDA out of memory: tried to allocate %s (GPU: %s free of %s total; nabla: %s allocated, %s cached)",
                        s1, s2, s3, s4, s5);
      else
        host->error_set("CUDA error allocating %s: %s (%s); last op launched: %s", s1, cudaGetErrorString(e), cudaGetErrorName(e), last_op);
      return nullptr;
    }
    try {
      b = new Block{(char *)p, seg, tag, false, small, nullptr, nullptr};
    } catch (...) {
      cudaFree(p);
      count(C_FREES);
      count(C_SYNCS);
      throw;
    }
    cached_bytes += seg;
  }
  // split off the unused tail when it is worth keeping
  size_t rest = b->size - size;
  if ((small && rest >= kRound) || (!small && rest > kSmallSize)) {
    Block *tail = new Block{b->ptr + size, rest, b->stream, false, small, b, b->next};
    if (b->next) b->next->prev = tail;
    b->next = tail;
    b->size = size;
    pool.insert(tail);
  }
  live.reserve(live.size() + 1);        // the only step that can throw, before b is handed out
  b->allocated = true;
  live[b->ptr] = b;
  allocated_bytes += b->size;
  if (allocated_bytes > peak_bytes) peak_bytes = allocated_bytes;
  return b->ptr;
}

void *dev_alloc(size_t request) {
  try {
    return dev_alloc_unguarded(request);
  } catch (...) {
    exception_to_error("cuda allocator");
    return nullptr;
  }
}

// pool.insert allocates a tree node and may throw: guarded too (the block
// then stays out of the pools: cached memory lost, never a crash).
static void dev_free_unguarded(void *p);
void dev_free(void *p) {
  try {
    dev_free_unguarded(p);
  } catch (...) {
    exception_to_error("cuda allocator (free)");
  }
}

static void dev_free_unguarded(void *p) {
  if (!p) return;
  std::lock_guard<std::mutex> lock(mu);
  auto it = live.find(p);
  if (it == live.end()) return;        // not ours: ignore rather than corrupt the pools
  Block *b = it->second;
  live.erase(it);
  allocated_bytes -= b->size;
  b->allocated = false;
  auto &pool = pool_of(b->small);
  // merge with free neighbours
  if (b->prev && !b->prev->allocated) {
    Block *a = b->prev;
    pool.erase(a);
    absorb(a, b);
    b = a;
  }
  if (b->next && !b->next->allocated) {
    Block *c = b->next;
    pool.erase(c);
    absorb(b, c);
  }
  pool.insert(b);
}

void alloc_stats(size_t *a, size_t *c, size_t *p) {
  std::lock_guard<std::mutex> lock(mu);
  *a = allocated_bytes; *c = cached_bytes; *p = peak_bytes;
}

int alloc_empty_cache(void) {
  std::lock_guard<std::mutex> lock(mu);
  release_free_segments();
  return 0;
}

}  // namespace ncu
