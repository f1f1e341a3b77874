// rtc_bind.h — how a fused-chain kernel compiled at run time for the
// emulated device (cuda/fuse_rtc.cu) reaches the emulator.
//
// The emulator is linked into nabla_cuda_emu.so with hidden visibility, so a
// shared object dlopen()ed later cannot bind to emu::run_launch or the
// load/store hooks by name.  The module hands it this table instead
// (nabla_rtc_bind); rtc_stub.cpp, linked into every such object, defines the
// names emu.h and the coverage instrumentation call as forwards through it:
// the kernel runs under the same launch and memory checks as the module's own.
#pragma once
#include <cuda_runtime.h>
#include <stddef.h>

namespace emu { struct Site; struct Config; }

#define NABLA_RTC_BIND_VERSION 1
struct RtcBind {
  int version;
  void (*run_launch)(const emu::Site &, const emu::Config &, const void *, void (*)(void *), void *, size_t);
  uint3 (*thread_idx)(void);
  uint3 (*block_idx)(void);
  dim3 (*block_dim)(void);
  dim3 (*grid_dim)(void);
  void (*load[5])(void *);    // __sanitizer_cov_load{1,2,4,8,16}
  void (*store[5])(void *);   // __sanitizer_cov_store{1,2,4,8,16}
};
