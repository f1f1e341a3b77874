// emu_planted.cu — kernels with planted bugs, for the emulated device's own
// test (tests/cuda/test_emulated.py).  Built like the CUDA module's sources
// for nabla_cuda_emu.so (cuda/emu/transform.py + emu.h + the emulator), as a
// stand-alone program:
//
//   emu_planted CASE      CASE = off_by_one | missing_sync | partial_warp_shuffle
//                         (the bug) or the same with "_fixed" (the correct kernel);
//                         launch_limits: configurations CUDA rejects, one per line
//
// Each case runs one kernel on fresh random data, checks the result on the
// host when the kernel is the correct one, and prints one line:
//   "result: ok" / "result: wrong values"
//   "sync: <cudaGetErrorName>: <cudaGetErrorString>"  (what the launch left)
// The emulator's own reports go to stderr; the test asserts both.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

// ---- 1. an off-by-one index: reads one element past the input ------------------------
__global__ void shift_copy(const float *in, float *out, int n, int planted) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = planted ? in[i + 1] : in[i];   // PLANTED: off-by-one
}

// ---- 2. a block sum that forgets the barrier between the writes and the reads ----------
__global__ void block_sum(const float *in, float *out, int planted) {
  __shared__ float part[128];
  int t = threadIdx.x;
  part[t] = in[blockIdx.x * blockDim.x + t];
  if (!planted) __syncthreads();                     // PLANTED: missing __syncthreads
  if (t == 0) {
    float s = 0;
    for (int k = 0; k < (int)blockDim.x; k++) s += part[k];
    out[blockIdx.x] = s;
  }
}

// ---- 3. a warp reduction over a partial warp with the full mask ---------------------------
__global__ void warp_sums(const float *in, float *out, int n, int planted) {
  int i = threadIdx.x, lane = i & 31;
  // lanes that exist in this warp (the last warp of a 48-thread block has 16)
  int width = n - (i & ~31) < 32 ? n - (i & ~31) : 32;
  unsigned mask = planted ? 0xffffffffu : (width == 32 ? 0xffffffffu : (1u << width) - 1);
  float v = in[i];
  for (int d = 1; d < 32; d <<= 1) {
    float o = __shfl_xor_sync(mask, v, d);           // PLANTED: full mask, 16 lanes
    if ((lane ^ d) < width) v += o;
  }
  if (lane == 0) out[i >> 5] = v;
}

// ---- 4. launch configurations an H100 rejects --------------------------------------------
__global__ void touch(float *p) { p[threadIdx.x] = 1; }

static void launch_limits(void) {
  float *d = NULL;
  cudaMalloc((void **)&d, 2048 * sizeof(float));
  struct { const char *what; dim3 g, b; size_t smem; } cases[] = {
    { "block_1024", dim3(1), dim3(1024), 0 },           // the largest legal block
    { "block_1025", dim3(1), dim3(1025), 0 },
    { "block_z_65", dim3(1), dim3(1, 1, 65), 0 },
    { "grid_y_65536", dim3(1, 65536), dim3(1), 0 },
    { "smem_48k", dim3(1), dim3(1), 48 * 1024 },        // the default limit
    { "smem_49k_no_optin", dim3(1), dim3(1), 49 * 1024 },
  };
  for (auto &c : cases) {
    cudaGetLastError();
    touch<<<c.g, c.b, c.smem>>>(d);
    printf("%s: %s\n", c.what, cudaGetErrorName(cudaGetLastError()));
  }
  cudaFuncSetAttribute(touch, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024);
  touch<<<1, 1, 100 * 1024>>>(d);
  printf("smem_100k_optin: %s\n", cudaGetErrorName(cudaGetLastError()));
  printf("optin_over_limit: %s\n", cudaGetErrorName(cudaFuncSetAttribute(touch, cudaFuncAttributeMaxDynamicSharedMemorySize, 300 * 1024)));
  cudaFree(d);
}

static float *dev_copy(const float *h, int n) {
  float *d = NULL;
  if (cudaMalloc((void **)&d, (size_t)n * sizeof(float)) != cudaSuccess) { fprintf(stderr, "cudaMalloc failed\n"); exit(2); }
  cudaMemcpy(d, h, (size_t)n * sizeof(float), cudaMemcpyHostToDevice);
  return d;
}

static float rnd(void) { return (float)rand() / (float)RAND_MAX * 2.0f - 1.0f; }

static bool close(float a, float b) { return a - b < 1e-4f * (1 + (b < 0 ? -b : b)) && b - a < 1e-4f * (1 + (b < 0 ? -b : b)); }

int main(int argc, char **argv) {
  if (argc != 2) { fprintf(stderr, "usage: emu_planted CASE\n"); return 2; }
  char name[64];
  snprintf(name, sizeof name, "%s", argv[1]);
  char *fx = strstr(name, "_fixed");
  const int planted = fx == NULL;
  if (fx) *fx = 0;
  srand((unsigned)time(NULL) ^ (unsigned)getpid());   // fresh data each run
  bool ok = true;
  cudaError_t e = cudaSuccess;                       // the first error the launch left (a copy back waits for it)
  if (!strcmp(name, "launch_limits")) {
    launch_limits();
    return 0;
  }
  if (!strcmp(name, "off_by_one")) {
    const int n = 1000;                              // 4 blocks, the last one partial
    float h[1000], r[1000];
    for (int i = 0; i < n; i++) h[i] = rnd();
    float *in = dev_copy(h, n), *out = dev_copy(h, n);
    shift_copy<<<(n + 255) / 256, 256>>>(in, out, n, planted);
    e = cudaMemcpy(r, out, sizeof r, cudaMemcpyDeviceToHost);
    for (int i = 0; i < n; i++) ok = ok && r[i] == h[i];
    cudaFree(in); cudaFree(out);
  } else if (!strcmp(name, "missing_sync")) {
    const int nb = 3, n = nb * 128;
    float h[3 * 128], r[3];
    for (int i = 0; i < n; i++) h[i] = rnd();
    float *in = dev_copy(h, n), *out = dev_copy(h, nb);
    block_sum<<<nb, 128>>>(in, out, planted);
    e = cudaMemcpy(r, out, sizeof r, cudaMemcpyDeviceToHost);
    for (int b = 0; b < nb; b++) {
      float s = 0;
      for (int k = 0; k < 128; k++) s += h[b * 128 + k];
      ok = ok && close(r[b], s);
    }
    cudaFree(in); cudaFree(out);
  } else if (!strcmp(name, "partial_warp_shuffle")) {
    const int n = 48;
    float h[48], r[2];
    for (int i = 0; i < n; i++) h[i] = rnd();
    float *in = dev_copy(h, n), *out = dev_copy(h, 2);
    warp_sums<<<1, n>>>(in, out, n, planted);
    e = cudaMemcpy(r, out, sizeof r, cudaMemcpyDeviceToHost);
    float s0 = 0, s1 = 0;
    for (int i = 0; i < 32; i++) s0 += h[i];
    for (int i = 32; i < 48; i++) s1 += h[i];
    ok = close(r[0], s0) && close(r[1], s1);
    cudaFree(in); cudaFree(out);
  } else {
    fprintf(stderr, "unknown case %s\n", name);
    return 2;
  }
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  cudaError_t l = cudaGetLastError();
  printf("result: %s\n", ok ? "ok" : "wrong values");
  printf("sync: %s: %s\n", cudaGetErrorName(e), cudaGetErrorString(e));
  printf("launch: %s\n", cudaGetErrorName(l));
  return 0;
}
