/*
** tdevice.h — device backends loaded at run time (the CUDA module).
**
** The CUDA backend is a separate shared module, nabla_cuda.so, built from
** cuda/ when nvcc is found.  The core never links against CUDA: the first
** time a CUDA tensor is asked for (nt_empty / nt_to_device with NT_CUDA, or
** any nt_cuda_* call below) the loader in tdevice.c dlopens the module, which
** registers its allocator and kernels in the op table.  Without a module, a
** driver or a GPU, asking for cuda fails with
**     "CUDA is not available: <reason>"
** and the CPU keeps working.
**
** Where the loader looks for the module, first hit wins:
**   1. $NABLA_CUDA_MODULE (a path to the .so);
**   2. the build tree the binary was built in (<builddir>/cuda/nabla_cuda.so);
**   3. <dir of the running binary>/../lib/nabla/nabla_cuda.so (installed);
**   4. <dir of the running binary>/cuda/nabla_cuda.so.
** Set NABLA_CUDA_DISABLE=1 to pretend there is no GPU.
**
** Same conventions as tensor.h: 0 / -1 + nt_error_msg() unless said otherwise.
*/
#ifndef NT_TDEVICE_H
#define NT_TDEVICE_H

#include "tensor.h"

/* ---- public: what the language calls ---------------------------------------- */
/* 1 if CUDA tensors can be made (loads the module on first use), else 0 with
** the reason ("no CUDA device: cudaGetDeviceCount: ...", "dlopen ...: ...")
** copied into reason (may be NULL). */
int    nt_cuda_available(char *reason, size_t n);
int    nt_cuda_device_count(void);            /* 0 when unavailable */
/* Waits for every queued GPU op; reports an asynchronous error (naming the op
** that launched it) as -1 + error.  A no-op (0) when CUDA was never loaded. */
int    nt_cuda_synchronize(void);
/* Caching-allocator statistics in bytes (all 0 when not loaded):
** allocated = live tensors, cached = reserved from the driver (>= allocated),
** peak = highest `allocated` so far. */
int    nt_cuda_memory(size_t *allocated, size_t *cached, size_t *peak);
int    nt_cuda_empty_cache(void);             /* returns unused cached blocks to the driver */
/* "highest" (default: full f32 matmuls) or "high"/"tf32" (f32 matmuls on TF32
** tensor cores) — PyTorch's torch.set_float32_matmul_precision.  May be
** called before the module is loaded. */
int    nt_set_matmul_precision(const char *precision);
const char *nt_get_matmul_precision(void);    /* "highest" or "high" */

/* Loads the backend of `dev` if needed: 0 when ready, else -1 with
** "CUDA is not available: <reason>".  NT_CPU is always ready. */
int    nt_device_load(nt_Device dev);
/* The message for "dev cannot be used" (the loader's reason for cuda). */
const char *nt_device_unavailable_msg(nt_Device dev);

/* ---- fused optimizer ops ------------------------------------------------------
** Op names "adamw_update" and "sgd_update" (nt_op_register).  The CUDA module
** registers them for NT_CUDA: ONE kernel launch updates every parameter.
** nt_KernelArgs: out = NULL, nin = 0, extra = nt_OptimArgs *.  All tensors
** contiguous, on the device, same dtype (f32; f64 too on CUDA) and numel as
** their parameter; grads[k] == NULL skips parameter k.
**   adamw: m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
**          p = p (1 - lr wd) - (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps),
**          bc1 = 1 - b1^step, bc2 = 1 - b2^step          (exp_avg = m, exp_avg_sq = v)
**   sgd:   d = g + wd p; with momentum: buf = mom buf + d, d = nesterov ? d + mom buf : buf;
**          p = p - lr d                                     (exp_avg = momentum buffers) */
typedef struct nt_OptimArgs {
  int n;                       /* number of parameters */
  nt_Tensor **params, **grads, **exp_avg, **exp_avg_sq;   /* n each (exp_avg_sq NULL for sgd) */
  double lr, beta1, beta2, eps, weight_decay;              /* sgd: beta1 = momentum */
  double step;                 /* adamw: 1-based step number */
  int nesterov;                /* sgd */
} nt_OptimArgs;
/* One update of every parameter (in place, not recorded by autograd), on the
** parameters' device.  grads[k] NULL leaves parameter k alone.  0 or -1 + error. */
int nt_optim_adamw(nt_OptimArgs *o);
int nt_optim_sgd(nt_OptimArgs *o);   /* exp_avg = momentum buffers (NULL when beta1 == 0) */

/* ---- ABI between the loader and the module (not for users) -------------------- */
#define NT_DEVICE_ABI_VERSION 1
struct nt_KernelArgs;
struct nt_Allocator;
typedef struct nt_HostApi {
  int abi_version;
  size_t sizeof_tensor, sizeof_kernel_args;     /* layout check */
  void (*error_set)(const char *fmt, ...);
  const char *(*error_msg)(void);
  void (*register_kernel)(int op, nt_Device dev, int (*fn)(const struct nt_KernelArgs *));
  void (*register_allocator)(nt_Device dev, const struct nt_Allocator *a);
  int (*op_register)(const char *name);
  const char *(*op_name)(int op);
  const int *matmul_tf32;                       /* live flag set by nt_set_matmul_precision */
} nt_HostApi;
typedef struct nt_DeviceApi {                   /* filled by the module's init */
  int (*device_count)(void);
  int (*synchronize)(void);
  int (*memory)(size_t *allocated, size_t *cached, size_t *peak);
  int (*empty_cache)(void);
} nt_DeviceApi;
/* The module exports:  int nabla_cuda_init(const nt_HostApi *, nt_DeviceApi *, char *reason, size_t n);
** returning 0, or -1 with the reason why CUDA cannot be used. */
typedef int (*nt_DeviceInitFn)(const nt_HostApi *host, nt_DeviceApi *api, char *reason, size_t n);

#endif
