/*
** iolibs.c — zlib and jansson, loaded on first use (util/dynload.h).
**
** A plain script needs neither, yet linking them cost every process at start
** (bench/results/2026-11-26-startup.md).  zlib inflates npz's DEFLATED
** members (npz.c); jansson parses safetensors headers (safetensors.c), and
** wire/ and kernel/ build and parse Jupyter and worker messages with it.
** They live here, in the lowest folder that uses them; the others link these
** same entry points.  Add an entry point here when code starts calling a new
** one (the link fails until then).
*/
#include "util/dynload.h"

#include <stdarg.h>
#include <jansson.h>
#include <zlib.h>

#ifndef NABLA_ZLIB_LIB
#define NABLA_ZLIB_LIB "libz.so.1"
#endif
#ifndef NABLA_JANSSON_LIB
#define NABLA_JANSSON_LIB "libjansson.so.4"
#endif

NB_DYNLIB(zlib_lib, NABLA_ZLIB_LIB, "zlib (Debian package zlib1g), used to read compressed .npz files")
NB_DYNLIB(jansson_lib, NABLA_JANSSON_LIB,
          "Jansson (Debian package libjansson4), used by safetensors, workers and the Jupyter kernel")

#define ZL(RT, NAME, PARAMS, ARGS) NB_SHIM(zlib_lib, RT, NAME, PARAMS, ARGS)
ZL(uLong, crc32_z, (uLong crc, const Bytef *buf, z_size_t len), (crc, buf, len))
ZL(int, inflate, (z_streamp strm, int flush), (strm, flush))
ZL(int, inflateEnd, (z_streamp strm), (strm))
ZL(int, inflateInit2_, (z_streamp strm, int windowBits, const char *version, int stream_size),
   (strm, windowBits, version, stream_size))

#define J(RT, NAME, PARAMS, ARGS) NB_SHIM(jansson_lib, RT, NAME, PARAMS, ARGS)
J(json_t *, json_array, (void), ())
J(int, json_array_append_new, (json_t *a, json_t *v), (a, v))
J(json_t *, json_array_get, (const json_t *a, size_t i), (a, i))
J(size_t, json_array_size, (const json_t *a), (a))
J(json_t *, json_deep_copy, (const json_t *v), (v))
J(int, json_dump_file, (const json_t *j, const char *path, size_t flags), (j, path, flags))
J(char *, json_dumps, (const json_t *j, size_t flags), (j, flags))
J(json_t *, json_integer, (json_int_t v), (v))
J(json_int_t, json_integer_value, (const json_t *j), (j))
J(json_t *, json_load_callback, (json_load_callback_t cb, void *data, size_t flags, json_error_t *e),
  (cb, data, flags, e))
J(json_t *, json_load_file, (const char *path, size_t flags, json_error_t *e), (path, flags, e))
J(json_t *, json_loadb, (const char *buf, size_t n, size_t flags, json_error_t *e), (buf, n, flags, e))
J(json_t *, json_null, (void), ())
J(json_t *, json_true, (void), ())
J(json_t *, json_false, (void), ())
J(json_t *, json_real, (double v), (v))
J(double, json_number_value, (const json_t *j), (j))
J(json_t *, json_object, (void), ())
J(int, json_object_del, (json_t *o, const char *key), (o, key))
J(json_t *, json_object_get, (const json_t *o, const char *key), (o, key))
J(void *, json_object_iter, (json_t *o), (o))
J(const char *, json_object_iter_key, (void *it), (it))
J(void *, json_object_iter_next, (json_t *o, void *it), (o, it))
J(json_t *, json_object_iter_value, (void *it), (it))
J(void *, json_object_key_to_iter, (const char *key), (key))
J(int, json_object_set_new, (json_t *o, const char *key, json_t *v), (o, key, v))
J(size_t, json_object_size, (const json_t *o), (o))
J(double, json_real_value, (const json_t *j), (j))
J(json_t *, json_string, (const char *s), (s))
J(size_t, json_string_length, (const json_t *j), (j))
J(const char *, json_string_value, (const json_t *j), (j))
J(json_t *, json_stringn, (const char *s, size_t n), (s, n))
J(json_t *, json_vpack_ex, (json_error_t *e, size_t flags, const char *fmt, va_list ap), (e, flags, fmt, ap))
NB_SHIMV(jansson_lib, json_delete, (json_t *j), (j))

/* variadic: forwarded as jansson's own json_pack does */
json_t *json_pack(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  json_t *v = json_vpack_ex(NULL, 0, fmt, ap);
  va_end(ap);
  return v;
}
