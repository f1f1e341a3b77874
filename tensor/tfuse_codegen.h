/*
** tfuse_codegen.h — CUDA C++ source for one recorded elementwise chain
** (tfuse.c's nt_Fused), compiled at run time by the CUDA module
** (cuda/fuse_rtc.cu: NVRTC on a GPU, the host compiler on the emulated
** device).  Internal to tensor/.
*/
#ifndef NT_TFUSE_CODEGEN_H
#define NT_TFUSE_CODEGEN_H
#include "tinternal.h"

/* The generated kernel's one argument besides n: the source declares the
** same struct (same field types and array sizes), so a copy of this block
** is what the kernel reads.  Scalars, shapes and strides are arguments, not
** constants: chains that differ only in them share one compiled kernel. */
typedef struct {
  void *out;                                        /* contiguous, the chain's shape */
  const void *in[NT_FUSE_MAXIN];                    /* first elements of the inputs */
  int64_t shape[NT_MAXDIM];                         /* the chain's shape */
  int64_t strides[NT_FUSE_MAXIN][NT_MAXDIM];        /* element strides at that shape (0: broadcast) */
  double s[NT_FUSE_MAXOPS][2];                      /* each op's scalars (binary scalar, clamp bounds) */
  void *save[NT_FUSE_MAXOPS];                       /* where op k's result is also stored (autograd), or NULL */
  int64_t vec;                                      /* elements per vector access (0: the scalar loop only) */
} nt_FuseArgs;

/* op o (with its operand dtypes) can be generated: what tfuse.c lets join a
** chain on CUDA */
bool nt_fuse_codegen_ok(const nt_Fused *b, const nt_FuseOp *o);
/* The kernel `nabla_fused(long long n, FuseArgs a)` computing r; views[i] is
** r->in[i] broadcast to r's shape (its strides and contiguity shape the
** source); save[k] non-NULL: op k's result is also stored (contiguous, its
** dtype: the values FusedBackward reads, tfuse_grad.c).  A malloc'd string,
** or NULL + error.  Fills args but for the pointers (the caller's: raw
** device addresses). */
char *nt_fuse_codegen(const nt_Fused *r, const nt_Tensor *views, void *const *save, nt_FuseArgs *args);
/* args->vec cleared when the pointers args holds (out, in) are not aligned
** to the source's vector accesses: the kernel then takes its scalar loop */
void nt_fuse_codegen_align(const nt_Fused *r, nt_FuseArgs *args);
/* FNV-1a of the source: the compile cache's key (with the text itself) */
uint64_t nt_fuse_hash(const char *s);
/* the pieces tfuse_codegen_bwd.c shares: an op's formula (NULL: none),
** written with operands x (and y) in compute type ct; the source's prelude
** (includes, rounding helpers); a dtype's value and storage types */
#include "tstrbuf.h"
const char *nt_fuse_formula_(int op, bool f64);
void nt_fuse_expand_(nt_StrBuf *b, const char *pat, const char *x, const char *y, nt_DType sd);
const char *nt_fuse_prelude_(void);
const char *nt_fuse_value_type_(nt_DType d);
const char *nt_fuse_storage_type_(nt_DType d);
#endif
