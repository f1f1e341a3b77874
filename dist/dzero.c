/*
** dzero.c — process memory numbers for dist.memory() (stdlib/dist.nbl),
** which reports what sharded data parallelism (dist.zero) saves per rank.
**
** The resident set comes from /proc/self/statm (pages in RAM now) and the
** peak from getrusage's ru_maxrss (the kernel's high-water mark, KiB on
** Linux).  The peak can be reset by writing "5" to /proc/self/clear_refs
** (Linux 4.0+), so a test can measure the peak of one phase (a training step)
** rather than of the whole process; where that file cannot be written the
** reset says so instead of silently keeping the old mark.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include "dist/dinternal.h"

/* resident bytes now, from /proc/self/statm (its second field, in pages) */
static int rss_now(double *bytes) {
  FILE *f = fopen("/proc/self/statm", "r");
  long size = 0, resident = 0;
  int ok = f && fscanf(f, "%ld %ld", &size, &resident) == 2;
  if (f) fclose(f);
  if (!ok) return -1;
  *bytes = (double)resident * (double)sysconf(_SC_PAGESIZE);
  return 0;
}

/* the high-water mark of the resident set: VmHWM of /proc/self/status (kB),
** which clear_refs resets; getrusage's ru_maxrss never goes down */
static int rss_peak(double *bytes) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmHWM:", 6)) { kb = strtol(line + 6, NULL, 10); break; }
  if (f) fclose(f);
  if (kb < 0) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru)) return -1;
    kb = ru.ru_maxrss;
  }
  *bytes = (double)kb * 1024.0;
  return 0;
}

static int b_rss(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)a; (void)n;
  double now = 0, peak = 0;
  if (rss_now(&now) || rss_peak(&peak)) return nb_error_kind(vm, "OSError", "dist_rss: cannot read this process's memory use from /proc");
  nb_Rec *r = nbR_new(2);
  nbR_set_cstr(r, "rss", nb_int(now));
  nbR_set_cstr(r, "peak_rss", nb_int(peak > now ? peak : now));
  *out = nb_obj(NB_TREC, r);
  return NB_OK;
}

static int b_reset_peak(nb_VM *vm, nb_Value *a, int n, nb_Value *out) {
  (void)a; (void)n;
  FILE *f = fopen("/proc/self/clear_refs", "w");
  int ok = f && fputs("5", f) >= 0;
  if (f && fclose(f)) ok = 0;
  if (!ok) return nb_error_kind(vm, "OSError", "dist_reset_peak: cannot reset the peak resident set (/proc/self/clear_refs is not writable here)");
  *out = nb_nil();
  return NB_OK;
}

static nb_Builtin zero_builtins[] = {
  { "dist_rss", b_rss, "", "dist_rss(): {rss, peak_rss} bytes of this process's resident set, now and at its high-water mark (use dist.memory)" },
  { "dist_reset_peak", b_reset_peak, "", "dist_reset_peak(): starts a new high-water mark of the resident set (Linux clear_refs)" },
  { NULL, NULL, NULL, NULL },
};

void nbD_zero_init(void) { nbC_register(zero_builtins); }
