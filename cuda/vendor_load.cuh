// vendor_load.cuh — loading a vendor library on first use (cuFFT in fft.cu,
// cuSOLVER in solver.cu): the first of its candidate names that dlopen()s.
// Each loader keeps its own reason string for when none does.
#pragma once
#include <dlfcn.h>
#include <cstdio>

// The handle of the first candidate that loads, or nullptr with the first
// candidate's dlopen error in why (the one that says most: the soname).
static inline void *dlopen_first(const char *const *cands, size_t n, char *why, size_t cap) {
  why[0] = 0;
  for (size_t i = 0; i < n; i++) {
    dlerror();
    if (void *h = dlopen(cands[i], RTLD_NOW | RTLD_LOCAL)) return h;
    if (!why[0]) { const char *e = dlerror(); snprintf(why, cap, "%s", e ? e : cands[i]); }
  }
  return nullptr;
}
