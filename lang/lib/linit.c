/*
** lib/linit.c — opens the standard libraries, as Lua's linit.c: the only
** place that lists them.  nb_vm_new calls nbopen_libs before it closes
** registration, so adding a library is one line here (and its file in
** meson.build), not an edit of the core.
*/
#include "lang/nbapi.h"
#include "lang/lib/nblib.h"

static void (*const openers[])(void) = {
  nbopen_base, nbopen_tensor, nbopen_plot, nbopen_progress, nbopen_files, nbopen_profile,
  nbopen_loader, nbopen_json,
  nbopen_rnn,
  nbopen_linalg,
  nbopen_set,
  nbopen_compile,
  nbopen_fft,
};

void nbopen_libs(void) {
  static int done;   /* later VMs find the tables registered */
  if (done) return;
  done = 1;
  for (size_t i = 0; i < sizeof openers / sizeof openers[0]; i++) openers[i]();
}
