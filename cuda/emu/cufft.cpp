// cufft.cpp — the cuFFT entry points cuda/fft.cu calls, served by kissfft
// (the CPU FFT, tensor/fft/kissfft/, built here for double) for the emulated
// device (docs/cuda.md, "Emulated device").
//
// As cublas.cpp and cusolver.cpp do, this implements cuFFT's contract, not a
// convenient one: a handle from cufftCreate, a plan made once by
// cufftMakePlanMany64 (rank 1 with the advanced layout: element j of batch b
// at b * dist + j * stride, both sides), auto allocation off means a work
// area must be set before exec, and it must be whole in device memory of
// the size the plan reported; every operand's extent is checked as device
// memory (a wrong size is an illegal address at the next synchronisation,
// as on a GPU); C2R / Z2D scribble NaN over their input afterwards, since
// real cuFFT may overwrite it, so a caller that reads it again fails its
// tests here.  Transforms are unnormalized, forward exp(-2 pi i jk / n).
// The emulated device runs work in order at the call, so the transform runs
// here, in place of a kernel; while the plan's stream captures a graph it is
// recorded instead and run by each replay (as cuBLAS's GEMMs, cublas.cpp).
// Making a plan while the compute stream captures fails (CUFFT_SETUP_FAILED):
// real cuFFT allocates and runs setup work then, which a capture forbids, so
// a caller that does not keep plan creation out of captures is caught here.  Every precision computes in double
// (kissfft's double build) and rounds once: the stand-in checks the call
// sequence, not cuFFT's single-precision rounding.
#include <cufft.h>
#include <cuda_runtime_api.h>
#include <functional>
#include <math.h>
#include <mutex>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <vector>

namespace emu {
bool device_range_ok(const void *p, size_t n, const char *what);
// api.cpp: while the stream captures a graph, fn is recorded for the replays (true)
bool capture_host_work(cudaStream_t st, std::function<void()> fn);
cudaStream_t the_stream(void);
void set_fault(cudaError_t e, const std::string &text);
void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
}

// kissfft for double, every external name prefixed so it cannot meet the
// float library or the core's own double build (tensor/fft/fkiss_f64.c)
#define kiss_fft_scalar double
#define kiss_fft_state emu_kissd_fft_state
#define kiss_fftr_state emu_kissd_fftr_state
#define kiss_fft_alloc emu_kissd_fft_alloc
#define kiss_fft emu_kissd_fft
#define kiss_fft_stride emu_kissd_fft_stride
#define kiss_fft_cleanup emu_kissd_fft_cleanup
#define kiss_fft_next_fast_size emu_kissd_fft_next_fast_size
#define kf_work emu_kissd_kf_work
#define kf_factor emu_kissd_kf_factor
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wsign-compare"
#pragma clang diagnostic ignored "-Wunused-parameter"
#pragma clang diagnostic ignored "-Wshadow"
#include "../../tensor/fft/kissfft/kiss_fft.c"
#pragma clang diagnostic pop

namespace {

struct PlanRec {
  bool made = false, auto_alloc = true;
  long long n = 0, batch = 0, istride = 1, idist = 0, ostride = 1, odist = 0;
  cufftType type = CUFFT_C2C;
  size_t work_size = 0;
  void *work = nullptr;
  cudaStream_t stream = nullptr;       // cufftSetStream's
  uint64_t gen = 0;                    // which plan this handle holds (a replay checks it is still the same)
};
uint64_t plan_gen;
std::mutex mu;
std::vector<PlanRec> recs;             // handle h is recs[h]; a destroyed one is reset
std::vector<int> free_handles;

PlanRec *rec(cufftHandle h) {
  if (h < 0 || (size_t)h >= recs.size()) return nullptr;
  return &recs[(size_t)h];
}
bool is_real_in(cufftType t) { return t == CUFFT_R2C || t == CUFFT_D2Z; }
bool is_real_out(cufftType t) { return t == CUFFT_C2R || t == CUFFT_Z2D; }
bool is_double(cufftType t) { return t == CUFFT_Z2Z || t == CUFFT_D2Z || t == CUFFT_Z2D; }

// bytes spanned by batch rows of len elements of size es at (stride, dist)
size_t span(long long batch, long long len, long long stride, long long dist, size_t es) {
  if (batch <= 0 || len <= 0) return 0;
  return ((size_t)(batch - 1) * (size_t)dist + (size_t)(len - 1) * (size_t)stride + 1) * es;
}

template <typename T> struct Cx { T r, i; };

// one plan's transform: in -> out, dir -1 forward, +1 inverse (c2c only)
template <typename T> cufftResult exec(cufftHandle h, const void *in, void *out, int dir, cufftType want, const char *what) {
  std::lock_guard<std::mutex> lk(mu);
  PlanRec *p = rec(h);
  if (!p || !p->made) return CUFFT_INVALID_PLAN;
  if (p->type != want) return CUFFT_INVALID_TYPE;
  if (!p->auto_alloc && p->work_size && !p->work) return CUFFT_INVALID_VALUE;   // no work area set
  if (want == CUFFT_C2C || want == CUFFT_Z2Z) { if (dir != CUFFT_FORWARD && dir != CUFFT_INVERSE) return CUFFT_INVALID_VALUE; }
  long long n = p->n, m = n / 2 + 1;
  bool rin = is_real_in(p->type), rout = is_real_out(p->type);
  long long ilen = rout ? m : n, olen = rin ? m : n;
  size_t ies = rin ? sizeof(T) : 2 * sizeof(T), oes = rout ? sizeof(T) : 2 * sizeof(T);
  size_t ib = span(p->batch, ilen, p->istride, p->idist, ies), ob = span(p->batch, olen, p->ostride, p->odist, oes);
  char buf[120];
  snprintf(buf, sizeof buf, "%s: idata", what);
  if (ib && !emu::device_range_ok(in, ib, buf)) return CUFFT_SUCCESS;   // a fault, reported at the next sync
  snprintf(buf, sizeof buf, "%s: odata", what);
  if (ob && !emu::device_range_ok(out, ob, buf)) return CUFFT_SUCCESS;
  if (!p->auto_alloc && p->work_size && !emu::device_range_ok(p->work, p->work_size, "cufftExec: the work area")) return CUFFT_SUCCESS;
  bool inverse = rout || dir == CUFFT_INVERSE;
  PlanRec q = *p;                      // the plan as it is now: a replay runs this call again
  auto run = [q, h, in, out, inverse, rin, rout, ilen, olen, ies, oes](bool replay) {
  if (replay) {   // (a call made now holds mu already)
    // a graph replaying a plan that was destroyed (or remade) since its
    // capture would run freed twiddles on a GPU: a fault here
    std::lock_guard<std::mutex> lk(mu);
    PlanRec *now = rec(h);
    if (!now || now->gen != q.gen) {
      emu::report("cufftExec: a captured transform replayed after its plan (handle %d) was destroyed", (int)h);
      emu::set_fault(cudaErrorIllegalAddress, "cufftExec: a captured transform replayed after its plan was destroyed");
      return;
    }
  }
  long long n = q.n, m = n / 2 + 1;
  kiss_fft_cfg cfg = kiss_fft_alloc((int)n, inverse ? 1 : 0, nullptr, nullptr);
  if (!cfg) abort();                   // out of host memory in the emulator itself
  std::vector<kiss_fft_cpx> t((size_t)n), f((size_t)n);
  const char *ip = (const char *)in;
  char *op = (char *)out;
  for (long long b = 0; b < q.batch; b++) {
    // gather row b as a full complex row (a real input: zero imaginary; a
    // Hermitian half: its mirror X[n - k] = conj(X[k]), the imaginary parts
    // of X[0] and X[n/2] ignored as cuFFT ignores them)
    for (long long j = 0; j < ilen; j++) {
      const char *e = ip + ((size_t)b * (size_t)q.idist + (size_t)j * (size_t)q.istride) * ies;
      if (rin) { t[(size_t)j].r = ((const T *)e)[0]; t[(size_t)j].i = 0; }
      else { t[(size_t)j].r = ((const T *)e)[0]; t[(size_t)j].i = ((const T *)e)[1]; }
    }
    if (rout) {
      t[0].i = 0;
      if (n % 2 == 0) t[(size_t)(n / 2)].i = 0;
      for (long long k = m; k < n; k++) { t[(size_t)k].r = t[(size_t)(n - k)].r; t[(size_t)k].i = -t[(size_t)(n - k)].i; }
    }
    kiss_fft(cfg, t.data(), f.data());
    for (long long k = 0; k < olen; k++) {
      char *e = op + ((size_t)b * (size_t)q.odist + (size_t)k * (size_t)q.ostride) * oes;
      ((T *)e)[0] = (T)f[(size_t)k].r;
      if (!rout) ((T *)e)[1] = (T)f[(size_t)k].i;
    }
  }
  free(cfg);
  if (rout) {   // real cuFFT may overwrite a C2R input: make relying on it fail loudly
    for (long long b = 0; b < q.batch; b++)
      for (long long j = 0; j < ilen; j++) {
        char *e = (char *)in + ((size_t)b * (size_t)q.idist + (size_t)j * (size_t)q.istride) * ies;
        ((T *)e)[0] = ((T *)e)[1] = (T)NAN;
      }
  }
  };
  if (!emu::capture_host_work(q.stream ? q.stream : emu::the_stream(), [run]() { run(true); })) run(false);
  return CUFFT_SUCCESS;
}

}  // namespace

extern "C" {

cufftResult cufftCreate(cufftHandle *handle) {
  if (!handle) return CUFFT_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(mu);
  if (!free_handles.empty()) { *handle = free_handles.back(); free_handles.pop_back(); }
  else { recs.emplace_back(); *handle = (cufftHandle)(recs.size() - 1); }
  recs[(size_t)*handle] = PlanRec();
  return CUFFT_SUCCESS;
}

cufftResult cufftDestroy(cufftHandle h) {
  std::lock_guard<std::mutex> lk(mu);
  PlanRec *p = rec(h);
  if (!p) return CUFFT_INVALID_PLAN;
  *p = PlanRec();
  free_handles.push_back(h);
  return CUFFT_SUCCESS;
}

cufftResult cufftSetAutoAllocation(cufftHandle h, int autoAllocate) {
  std::lock_guard<std::mutex> lk(mu);
  PlanRec *p = rec(h);
  if (!p) return CUFFT_INVALID_PLAN;
  if (p->made) return CUFFT_INVALID_VALUE;   // must precede plan creation, as in cuFFT
  p->auto_alloc = autoAllocate != 0;
  return CUFFT_SUCCESS;
}

cufftResult cufftMakePlanMany64(cufftHandle h, int rank, long long *n, long long *inembed, long long istride, long long idist,
                                long long *onembed, long long ostride, long long odist, cufftType type, long long batch,
                                size_t *workSize) {
  std::lock_guard<std::mutex> lk(mu);
  PlanRec *p = rec(h);
  if (!p) return CUFFT_INVALID_PLAN;
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(emu::the_stream(), &cap) == cudaSuccess && cap != cudaStreamCaptureStatusNone)
    return CUFFT_SETUP_FAILED;                 // see the top of this file
  if (rank != 1) return CUFFT_NOT_SUPPORTED;   // the stand-in serves what fft.cu uses: one axis
  if (!n || n[0] < 1 || n[0] > INT32_MAX || batch < 1) return CUFFT_INVALID_SIZE;
  if (type != CUFFT_C2C && type != CUFFT_Z2Z && type != CUFFT_R2C && type != CUFFT_D2Z && type != CUFFT_C2R && type != CUFFT_Z2D)
    return CUFFT_INVALID_TYPE;
  long long m = n[0] / 2 + 1;
  long long ilen = is_real_out(type) ? m : n[0], olen = is_real_in(type) ? m : n[0];
  if (!inembed || !onembed) {   // the basic layout: dense rows
    istride = ostride = 1;
    idist = ilen;
    odist = olen;
  } else if (inembed[0] < ilen || onembed[0] < olen || istride < 1 || ostride < 1 || idist < 1 || odist < 1) {
    return CUFFT_INVALID_VALUE;
  }
  p->made = true;
  p->gen = ++plan_gen;
  p->n = n[0]; p->batch = batch; p->type = type;
  p->istride = istride; p->idist = idist; p->ostride = ostride; p->odist = odist;
  // a work area as real cuFFT would ask for one: a row's worth per 8 rows (so a
  // caller that ignores the size, or never sets the area, is caught)
  size_t es = is_double(type) ? 16 : 8;
  p->work_size = (size_t)n[0] * es * (size_t)(1 + (batch > 8 ? 8 : batch));
  if (workSize) *workSize = p->work_size;
  return CUFFT_SUCCESS;
}

cufftResult cufftSetWorkArea(cufftHandle h, void *workArea) {
  std::lock_guard<std::mutex> lk(mu);
  PlanRec *p = rec(h);
  if (!p || !p->made) return CUFFT_INVALID_PLAN;
  p->work = workArea;
  return CUFFT_SUCCESS;
}

cufftResult cufftSetStream(cufftHandle h, cudaStream_t st) {
  std::lock_guard<std::mutex> lk(mu);
  PlanRec *p = rec(h);
  if (!p) return CUFFT_INVALID_PLAN;
  p->stream = st;                              // work runs in order at the call, or is captured on it
  return CUFFT_SUCCESS;
}

cufftResult cufftExecC2C(cufftHandle h, cufftComplex *i, cufftComplex *o, int dir) { return exec<float>(h, i, o, dir, CUFFT_C2C, "cufftExecC2C"); }
cufftResult cufftExecZ2Z(cufftHandle h, cufftDoubleComplex *i, cufftDoubleComplex *o, int dir) { return exec<double>(h, i, o, dir, CUFFT_Z2Z, "cufftExecZ2Z"); }
cufftResult cufftExecR2C(cufftHandle h, cufftReal *i, cufftComplex *o) { return exec<float>(h, i, o, CUFFT_FORWARD, CUFFT_R2C, "cufftExecR2C"); }
cufftResult cufftExecD2Z(cufftHandle h, cufftDoubleReal *i, cufftDoubleComplex *o) { return exec<double>(h, i, o, CUFFT_FORWARD, CUFFT_D2Z, "cufftExecD2Z"); }
cufftResult cufftExecC2R(cufftHandle h, cufftComplex *i, cufftReal *o) { return exec<float>(h, i, o, CUFFT_INVERSE, CUFFT_C2R, "cufftExecC2R"); }
cufftResult cufftExecZ2D(cufftHandle h, cufftDoubleComplex *i, cufftDoubleReal *o) { return exec<double>(h, i, o, CUFFT_INVERSE, CUFFT_Z2D, "cufftExecZ2D"); }

}  // extern "C"
