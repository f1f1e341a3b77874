/*
** lib/nblib.h — the standard libraries of builtins and their openers, as
** Lua's lualib.h.  Each library keeps its builtins in static tables and
** registers them from its opener (nbopen_<lib>), which nbopen_libs runs
** once, before the first VM exists (see nbapi.h for the rule), so openers
** need no guard of their own.  linit.c is the one list
** of the standard libraries; a front end that adds its own (dist's
** nbD_init) calls its opener before nb_vm_new.
*/
#ifndef NBLIB_H
#define NBLIB_H

#include <stddef.h>
#include "lang/nbapi.h"

void nbopen_base(void);       /* lbase.c: print, len, lists, strings, math, time, ... */
void nbopen_tensor(void);     /* ltensor.c, ltops.c, ltgrad.c, loptim.c, ltio.c, ltcompose.c */
void nbopen_plot(void);       /* lplot.c: plot, scatter, hist, imshow, ... */
void nbopen_progress(void);   /* lprogress.c: progress() */
void nbopen_files(void);      /* lfiles.c: read_text, write_text, lines, ... */
void nbopen_profile(void);    /* lprofile.c: profile(), profile_start/stop/table (tensor/tprofile.h) */
void nbopen_linalg(void);     /* ltlinalg.c: the linalg record, cross, kron (tensor/linalg/) */
void nbopen_set(void);        /* ltset.c: set and index ops, cumulative ops, distances, special functions (tensor/index/) */
void nbopen_compile(void);    /* lcompile.c: compile(f), a step as one CUDA graph (tensor/tcompile.h) */
void nbopen_rnn(void);        /* ltrnn.c: lstm, gru, rnn; conv1d, conv_transpose1d/2d */
void nbopen_loader(void);     /* lloader.c: data.loader's worker processes, permutation, pinned copies */
void nbopen_json(void);       /* ljson.c: load_json, save_json, json_parse, json_format (jansson) */
void nbopen_fft(void);        /* ltfft.c: the fft record; complex, real, imag, conj, angle, view_as_real/complex */

/* all of the above, once (linit.c); nb_vm_new calls it (lvm.h declares it for the core) */
void nbopen_libs(void);

/* lfiles.c, shared with ljson.c: a path argument (a string without NUL
** bytes), and a whole regular file read into a malloc'd buffer (size
** checked before reading; a FIFO or device refused) */
int nblib_path_arg(nb_VM *vm, const char *fname, nb_Value v, const char **out);
int nblib_slurp(nb_VM *vm, const char *fname, const char *path, char **data, size_t *n);

#endif
