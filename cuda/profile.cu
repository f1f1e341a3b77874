// profile.cu — the profiler's timing events (tensor/tprofile.c): the device
// half of nt_cuda_timer_*.  The core brackets every device dispatch of a
// profiled program with two of them, recorded on the compute stream (the one
// every op's launches go to), and reads their elapsed times after a single
// synchronize at the end of the profile.  No kernel here: an event is a
// marker in the stream, and recording one costs the host ~1-2 µs.
//
// Timing events (no cudaEventDisableTiming, unlike api_event_create in
// module.cu, whose events only order streams).  Under the emulated device
// (cuda/emu/api.cpp) an event's time is the host's clock when it is recorded:
// the compute stream runs each launch before returning, so the difference is
// the ops' run time there too.
#include "common.cuh"

namespace ncu {

static void *prof_timer_create(void) {
  cudaEvent_t ev = nullptr;
  if (bind_device()) return nullptr;
  cudaError_t e = cudaEventCreate(&ev);
  if (e != cudaSuccess) { cuda_fail(e, "cudaEventCreate", __FILE__, __LINE__); return nullptr; }
  return (void *)ev;
}

static int prof_timer_record(void *t) {
  if (bind_device()) return -1;
  CU(cudaEventRecord((cudaEvent_t)t, stream));
  return 0;
}

// after a synchronize: both events are complete
static int prof_timer_elapsed(void *a, void *b, float *ms) {
  if (bind_device()) return -1;
  CU(cudaEventElapsedTime(ms, (cudaEvent_t)a, (cudaEvent_t)b));
  return 0;
}

static void prof_timer_destroy(void *t) {
  if (t && !bind_device()) cudaEventDestroy((cudaEvent_t)t);
}

void profile_fill_api(nt_DeviceApi *api) {
  api->timer_create = prof_timer_create;
  api->timer_record = prof_timer_record;
  api->timer_elapsed = prof_timer_elapsed;
  api->timer_destroy = prof_timer_destroy;
}

}  // namespace ncu
