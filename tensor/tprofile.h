/*
** tprofile.h — the op profiler (tprofile.c): where a program's time goes, op
** by op, forward and backward, on the CPU and the GPU.  What torch.profiler's
** key_averages() is to PyTorch users; lang/lib/lprofile.c makes it the
** builtins profile(f, ...) / profile_start() / profile_stop() and the
** %%profile magic.
**
** While a profile is on (on the thread that started it), every op dispatch
** (tbackend.h nt_dispatch), every autograd node's backward formula
** (tautograd.c: a range named after the node, e.g. "MatmulBackward", whose
** ops are its children) and every fused elementwise chain computed
** (tfuse.c: "fused(mul,add)") is an event with host start and end times.
** Events nest: an op's SELF time is its time minus that of the events inside
** it, so self times never count anything twice and add up to at most the wall
** time.  An event is "backward" when it runs inside an autograd backward pass.
**
** On CUDA every device dispatch is bracketed by two timing events recorded on
** the compute stream (cuda/profile.cu, taken from a pool); nothing waits while
** the profile runs: nt_profile_stop waits once for the stream and reads every
** pair's elapsed time — the op's GPU time, its launches and any gap between
** them.  A reference event at the first GPU op places GPU intervals on the
** host's time line (the trace's "GPU" row).
**
** Off, the cost is one load and one branch per dispatch (nt_prof_on_).
** Bounds: NT_PROF_MAX_EVENTS events, NT_PROF_MAX_TIMED GPU-timed events per
** profile; later ones are counted as dropped (the report says so), never
** silently lost.
*/
#ifndef NT_TPROFILE_H
#define NT_TPROFILE_H

#include <stdbool.h>
#include <stdint.h>
#include "tensor.h"

#define NT_PROF_MAX_EVENTS (1 << 21)
#define NT_PROF_MAX_TIMED  (1 << 18)

typedef enum { NT_PROF_OP = 0, NT_PROF_NODE = 1, NT_PROF_FUSED = 2 } nt_ProfKind;

typedef struct nt_ProfEvent {
  int64_t t0, t1;           /* host ns since the profile started */
  int64_t child_ns;         /* host time of the events directly inside it */
  double gpu_ms;            /* GPU time between its two timing events; -1: not timed */
  double gpu_child_ms;      /* GPU time of the timed events inside it */
  double gpu_start_ms;      /* its start on the GPU, ms after the reference event */
  int32_t name;             /* index into nt_Profile.names */
  int32_t parent;           /* index of the enclosing event, -1 at top level */
  int32_t timer;            /* first of its two timing events, -1 when not timed */
  uint8_t phase;            /* 0 forward, 1 backward */
  uint8_t device;           /* nt_Device */
  uint8_t kind;             /* nt_ProfKind */
  uint8_t depth;            /* nesting depth (capped at 255) */
} nt_ProfEvent;

typedef struct nt_Profile {
  nt_ProfEvent *ev;
  int64_t n;                /* events recorded */
  int64_t dropped;          /* events past NT_PROF_MAX_EVENTS (not recorded) */
  int64_t untimed;          /* GPU events past NT_PROF_MAX_TIMED (host time only) */
  int64_t wall_ns;          /* start to stop */
  int64_t gpu_ref_ns;       /* host time of the GPU reference event; -1: no GPU op */
  char **names; int nnames; /* owned */
} nt_Profile;

/* One row of the summary: the events of one (name, phase, device). */
typedef struct nt_ProfRow {
  const char *name;         /* borrowed from the profile */
  int phase, device, kind;
  int64_t calls;
  double self_ms, total_ms;          /* host */
  double gpu_self_ms, gpu_total_ms;  /* 0 on the CPU */
} nt_ProfRow;

/* Starts profiling this thread's ops.  -1 + error when a profile is already
** on (profiles do not nest). */
int nt_profile_start(void);
/* Stops, waits once for the GPU if it was used, resolves the timings; the
** profile (free with nt_profile_free), or NULL + error (the profiler is off
** either way). */
nt_Profile *nt_profile_stop(void);
/* Stops and discards (after an error in the profiled code). */
void nt_profile_abort(void);
bool nt_profile_active(void);
void nt_profile_free(nt_Profile *p);
/* Rows grouped by (name, phase, device), in first-seen order; *rows is
** malloc'd (free it).  0, or -1 + error (out of memory). */
int nt_profile_rows(const nt_Profile *p, nt_ProfRow **rows, int *nrows);
/* Writes a Chrome trace-event file (chrome://tracing, Perfetto): one "X"
** event per op on the host row (tid 1) and per GPU-timed op on the GPU row
** (tid 2), args {phase, self_us, gpu_us}.  Atomic (tensor/io/atomicfile.h).
** 0, or -1 + error naming the file. */
int nt_profile_write_trace(const nt_Profile *p, const char *path);

/* ---- hooks (tensor/ only) ---------------------------------------------------
** nt_prof_on_ is non-zero while any thread profiles; the calls below check
** that it is this one.  nt_prof_begin_ returns a token for nt_prof_end_ (-1:
** not recording; nt_prof_end_ ignores it). */
extern int nt_prof_on_;
int  nt_prof_begin_(const char *name, int kind, int device);
void nt_prof_end_(int token);
struct nt_Fused;
int  nt_prof_begin_fused_(const struct nt_Fused *r);   /* "fused(mul,add)" on the CPU */

#endif
