/*
** util/clock.h — the process's clocks, for every layer (tensor, lang, dist,
** kernel, front ends): one definition instead of a copy per file.
**
** nu_mono_s / nu_mono_ms: CLOCK_MONOTONIC, for timeouts, intervals and
** benchmarks (never jumps when the wall clock is set).
** nu_wall_s: CLOCK_REALTIME, seconds since the epoch, for what users see as
** "the time" (the language's time()).
*/
#ifndef NABLA_UTIL_CLOCK_H
#define NABLA_UTIL_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline double nu_mono_s(void) {
  struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
static inline double nu_mono_ms(void) {
  struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}
static inline double nu_wall_s(void) {
  struct timespec ts; clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
