/*
** lplotpng.c — libpng, loaded on first use (util/dynload.h).
**
** Only plot's PNG writer (lplotdraw.c) and the kernelspec installer's icons
** (kernel/install.c) write PNGs, yet linking libpng cost every process at
** start (bench/results/2026-11-26-startup.md).  Add an entry point here when
** code starts calling a new one (the link fails until then).
*/
#include "util/dynload.h"

#include <png.h>

#ifndef NABLA_PNG_LIB
#define NABLA_PNG_LIB "libpng16.so.16"
#endif

NB_DYNLIB(png_lib, NABLA_PNG_LIB, "libpng (Debian package libpng16-16), used to write PNG plots")

#define P(RT, NAME, PARAMS, ARGS) NB_SHIM(png_lib, RT, NAME, PARAMS, ARGS)
#define PV(NAME, PARAMS, ARGS) NB_SHIMV(png_lib, NAME, PARAMS, ARGS)
P(png_infop, png_create_info_struct, (png_const_structrp p), (p))
P(png_structp, png_create_write_struct, (png_const_charp ver, png_voidp eptr, png_error_ptr efn, png_error_ptr wfn),
  (ver, eptr, efn, wfn))
P(png_voidp, png_get_io_ptr, (png_const_structrp p), (p))
P(jmp_buf *, png_set_longjmp_fn, (png_structrp p, png_longjmp_ptr fn, size_t n), (p, fn, n))
PV(png_destroy_write_struct, (png_structpp pp, png_infopp ip), (pp, ip))
PV(png_init_io, (png_structrp p, png_FILE_p fp), (p, fp))
PV(png_set_IHDR, (png_const_structrp p, png_inforp i, png_uint_32 w, png_uint_32 h, int depth, int color,
                  int interlace, int compression, int filter),
   (p, i, w, h, depth, color, interlace, compression, filter))
PV(png_set_write_fn, (png_structrp p, png_voidp io, png_rw_ptr wfn, png_flush_ptr ffn), (p, io, wfn, ffn))
PV(png_write_end, (png_structrp p, png_inforp i), (p, i))
PV(png_write_image, (png_structrp p, png_bytepp rows), (p, rows))
PV(png_write_info, (png_structrp p, png_const_inforp i), (p, i))
PV(png_write_row, (png_structrp p, png_const_bytep row), (p, row))
