// rtc_stub.cpp — linked into each fused-chain kernel compiled at run time for
// the emulated device (cuda/fuse_rtc.cu): the emulator's entry points that
// emu.h and -fsanitize-coverage=trace-loads,trace-stores refer to, forwarded
// through the table the module hands over (rtc_bind.h says why).  Built once
// with the emulator's flags but WITHOUT the load/store instrumentation, like
// runtime.cpp: its own accesses are not the kernel's.
#define EMU_RUNTIME 1
#include "emu.h"
#include "rtc_bind.h"

static const RtcBind *bind;

extern "C" __attribute__((visibility("default"))) int nabla_rtc_bind(const RtcBind *b) {
  if (!b || b->version != NABLA_RTC_BIND_VERSION) return -1;
  bind = b;
  return 0;
}

namespace emu {
void run_launch(const Site &site, const Config &cfg, const void *kernel_id, void (*body)(void *), void *ctx, size_t ctx_size) {
  bind->run_launch(site, cfg, kernel_id, body, ctx, ctx_size);
}
uint3 thread_idx(void) { return bind->thread_idx(); }
uint3 block_idx(void) { return bind->block_idx(); }
dim3 block_dim(void) { return bind->block_dim(); }
dim3 grid_dim(void) { return bind->grid_dim(); }
}  // namespace emu

#define HOOK(i, n) \
  extern "C" void __sanitizer_cov_load##n(void *a) { bind->load[i](a); } \
  extern "C" void __sanitizer_cov_store##n(void *a) { bind->store[i](a); }
HOOK(0, 1) HOOK(1, 2) HOOK(2, 4) HOOK(3, 8) HOOK(4, 16)
#undef HOOK
