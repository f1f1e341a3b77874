/*
** tfuse_rtc.h — the contract between tensor/tfuse.c and the CUDA module's
** run-time compiled fused chains (cuda/fuse_rtc.cu), and what lang/ reads
** of them (fuse_stats()).
**
** The module registers the op "fused_chain" (nt_op_register) on NT_CUDA; its
** kernel takes an nt_FuseLaunch in nt_KernelArgs.extra (the op table's own
** extension point: no module ABI entry).  With src set it compiles src
** (tensor/tfuse_codegen.c's kernel nabla_fused; cached by key and text) and
** launches it over n elements with the argument block args: 0, or 0 with
** cannot = 1 and why set (it cannot compile here, NABLA_FUSE_RTC=0
** included: the chain and later ones run op by op), or 0 with cannot = 2
** (this source failed to compile: this chain runs op by op), or -1 + error.
** With src NULL it fills the counters.
*/
#ifndef NT_TFUSE_RTC_H
#define NT_TFUSE_RTC_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
  const char *src;        /* NULL: a counters query */
  uint64_t key;           /* the source's hash */
  int64_t n;              /* elements */
  const void *args;       /* the kernel's argument block (tfuse_codegen.h nt_FuseArgs) */
  size_t nbytes;
  int cannot;             /* out: 1 = no compiler here, 2 = this source failed (why) */
  char why[600];
  int64_t compiles, hits; /* out (counters): kernels compiled, compile-cache hits */
  double seconds;         /* out (counters): seconds spent compiling */
} nt_FuseLaunch;

/* CUDA chains (tfuse.c): launched as one generated kernel, run op by op
** (no compiler), kernels compiled, compile-cache hits, seconds compiling */
void nt_fuse_cuda_stats(int64_t *fused, int64_t *unfused, int64_t *compiles, int64_t *hits, double *seconds);
/* fused CUDA chains launched with every operand aligned for 16-byte vector accesses */
int64_t nt_fuse_cuda_vec_launches(void);

/* FusedBackward (tfuse_bwd.c): backward passes run as one fused pass, run op
** by op instead, and the last reason for that (static text, NULL: none) */
void nt_fuse_bwd_stats(int64_t *fused, int64_t *fallbacks, const char **why);

#endif
