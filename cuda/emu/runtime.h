// runtime.h — what the emulator's two halves share: runtime.cpp (running
// kernels: fibers, the scheduler, the access checker, barriers, warp
// collectives, atomics) and api.cpp (the CUDA runtime API the module calls,
// served on host memory: devices, memory, streams, errors).  Private to
// cuda/emu/: the emulator is built with -fvisibility=hidden, so none of this
// is seen outside nabla_cuda_emu.so.
#pragma once
#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <stddef.h>
#include <stdint.h>

// EMU_ASAN: this build is ASan-instrumented (the module too): device memory
// between allocations is poisoned, so ASan and the checker see the same fault
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifdef EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

// built with -fvisibility=hidden: these bind inside the module (never to a real libcudart
// or to the sanitizer runtime's weak coverage stubs)
#define EXPORT extern "C"

namespace emu {

// ---- device description (a plausible H100 SXM) ----------------------------------------------------
constexpr const char *kDeviceName = "NVIDIA H100 80GB HBM3";
constexpr size_t kTotalMem = 85520809984ull;              // 79.6 GiB
constexpr int kMaxThreadsPerBlock = 1024;
constexpr size_t kSmemDefault = 48 * 1024;                 // without cudaFuncSetAttribute
constexpr size_t kSmemOptin = 232448;                      // 227 KiB
constexpr size_t kSmemSlack = 64 * 1024;                   // arena past the limit: small overruns land here
constexpr size_t kStackSize = 512 * 1024;                  // per emulated thread (ASan frames are large)

int num_sms(void);                                         // NABLA_EMU_SMS, else 132

// ---- errors (runtime.cpp) ------------------------------------------------------------------------
extern std::mutex mu;                                      // guards everything host threads share
extern thread_local cudaError_t last_error;                // what cudaGetLastError returns
extern std::string shown_text;                             // the report of the fault last returned
cudaError_t take_fault(void);                              // a kernel's fault, returned once
cudaError_t fail(cudaError_t e);                           // sets last_error, returns e
void set_fault(cudaError_t e, const std::string &text);    // the first fault wins; the next synchronising call returns it
void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));   // "nabla-emu: ..." on stderr

// ---- device memory map (runtime.cpp) -------------------------------------------------------------
// raw: cudaMalloc'ed and pinned host ranges.  blocks: the caching allocator's
// blocks at their requested size; a raw range holding blocks (a segment) is
// valid only inside them.  All guarded by mu.
struct Range { uintptr_t end; bool carved; bool pinned; bool mapped; };
extern std::map<uintptr_t, Range> raw;
extern std::map<uintptr_t, uintptr_t> blocks;              // start -> end
extern std::atomic<unsigned> map_gen;                      // bumped when a range goes away
extern size_t mem_used;
std::string describe_address(uintptr_t a);                 // for reports; takes mu (the caller must not hold it)
bool range_ok(const void *p, size_t n);                    // [p, p + n) is valid device memory

// ---- launches (runtime.cpp) ----------------------------------------------------------------------
extern std::unordered_map<const void *, size_t> &smem_optin;   // cudaFuncSetAttribute's limits, by kernel
cudaStream_t the_stream(void);                             // the compute stream (the first one created)
// api.cpp: the streams' ordering model (docs/cuda.md, "Emulated device": side streams)
bool stream_known(cudaStream_t s);                         // the_stream, a created side stream, or a legacy handle
void stream_note_write(cudaStream_t s);                    // a kernel was launched on s (it may write any device memory)

// ---- stream capture (api.cpp, "graphs"): CUDA graphs on the emulated device ------------------------------
// While the compute stream captures, run_launch hands its launch here instead
// of running it: the launch (site, geometry, the argument block copied) is
// recorded in the graph, and cudaGraphLaunch runs the recorded launches,
// copies and memsets again, in order.  True when the launch was recorded.
struct Site;
struct Config;
bool capture_launch(const Site &site, const Config &cfg, const void *kernel_id, void (*body)(void *), const void *ctx, size_t ctx_size);
// the caching allocator's block notes (emu_note_block / emu_forget_block)
// made during a capture: recorded too, so a replay's kernels are checked
// against the blocks as they were at that point of the captured work
void capture_block_note(void *p, size_t request, size_t rounded, bool forget);
// work the emulator runs on the host for a stream (cuBLAS's GEMMs, cublas.cpp):
// while that stream captures, fn is recorded and run by each replay instead of
// now (true); otherwise the caller runs it now (false)
bool capture_host_work(cudaStream_t st, std::function<void()> fn);

}  // namespace emu
