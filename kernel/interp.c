/*
** interp.c — the kernel's language side (like xeus's interpreter half): the
** shell requests (execute, complete, inspect, is_complete, history, comms,
** kernel_info, shutdown) and the output sink that turns what the VM shows
** into iopub messages.
**
** Output: stdout/stderr text is buffered and published at most every ~50 ms
** (from write() when the buffer is that old, and from the control thread's
** timer when the cell is busy computing), and always before any other output
** and at the end of the cell, so order is kept.  The value of a cell's last
** expression arrives through the sink's result() (NB_ECHO_LAST) and becomes
** the execute_result; display() calls become display_data.
*/
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>
#include "kernel/kint.h"
#include "dist/dist.h"

#define STREAM_INTERVAL 0.05     /* seconds between stream messages */
#define STREAM_MAX (1u << 20)    /* publish at once beyond this many bytes */
#define HISTORY_MAX 10000

typedef struct Buf { char *p; size_t n, cap; } Buf;

static void buf_add(Buf *b, const char *s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) abort();
    b->p = p; b->cap = cap;
  }
  if (n) memcpy(b->p + b->n, s, n);
  b->n += n; b->p[b->n] = 0;
}

typedef struct HEntry { int session, line; char *input, *output; } HEntry;

typedef struct Interp {
  Kernel *k;
  nb_Sink sink;
  const wire_Msg *req;     /* the execute_request being served */
  int allow_stdin, silent;
  int exec_count;
  json_t *result;          /* the cell's value (a mime bundle), published as execute_result */
  int capture;             /* evaluating user_expressions: displays go to captured */
  json_t *captured;
  /* stream buffer (under k->io_mu): one stream at a time, so order is kept */
  Buf stream; int stream_id; double stream_since;
  /* history */
  int hist_loaded, session;
  HEntry *hist; int nhist, caphist;
  char *hist_path;
} Interp;

static Interp I;

static double now(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9; }

/* ------------------------------------------------------------ UTF-8 */
/* length of the valid UTF-8 sequence at s (1..4), or 0 when invalid/truncated */
static int utf8_len(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  if (c < 0x80) return 1;
  int len; unsigned min;
  if ((c & 0xe0) == 0xc0) { len = 2; min = 0x80; c &= 0x1f; }
  else if ((c & 0xf0) == 0xe0) { len = 3; min = 0x800; c &= 0x0f; }
  else if ((c & 0xf8) == 0xf0) { len = 4; min = 0x10000; c &= 0x07; }
  else return 0;
  if ((size_t)len > n) return 0;
  for (int i = 1; i < len; i++) { if ((s[i] & 0xc0) != 0x80) return 0; c = (c << 6) | (s[i] & 0x3f); }
  if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return 0;
  return len;
}

json_t *k_jstr(const char *s, size_t n) {
  json_t *j = json_stringn(s ? s : "", s ? n : 0);
  if (j) return j;
  Buf b = {0};
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; i < n;) {
    int l = utf8_len(u + i, n - i);
    if (l) { buf_add(&b, s + i, (size_t)l); i += (size_t)l; }
    else { buf_add(&b, "\xef\xbf\xbd", 3); i++; }
  }
  j = json_stringn(b.p ? b.p : "", b.n);
  free(b.p);
  return j ? j : json_string("");
}

/* how many bytes of s[0..n) end on a character boundary (holds back a split sequence) */
static size_t utf8_complete_prefix(const char *s, size_t n) {
  size_t i = n, k = 0;
  while (i > 0 && k < 3 && ((unsigned char)s[i - 1] & 0xc0) == 0x80) { i--; k++; }
  if (i == 0) return n;
  unsigned c = (unsigned char)s[i - 1];
  int need = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 1;
  if (need > 1 && (size_t)need > k + 1) return i - 1;   /* the last character is not complete yet */
  return n;
}

/* code points <-> byte offsets */
static size_t cp_to_byte(const char *s, size_t n, long cp) {
  size_t i = 0;
  while (cp > 0 && i < n) {
    int l = utf8_len((const unsigned char *)s + i, n - i);
    i += l ? (size_t)l : 1; cp--;
  }
  return i;
}
static long byte_to_cp(const char *s, size_t n, size_t b) {
  long cp = 0; size_t i = 0;
  if (b > n) b = n;
  while (i < b) { int l = utf8_len((const unsigned char *)s + i, n - i); i += l ? (size_t)l : 1; cp++; }
  return cp;
}

/* ------------------------------------------------------------ streams */
static void stream_flush_locked(Kernel *k, int force) {
  Buf *b = &I.stream;
  if (!b->n) return;
  size_t n = force ? b->n : utf8_complete_prefix(b->p, b->n);
  if (!n) return;
  json_t *c = json_pack("{s:s, s:o}", "name", I.stream_id == NB_STDERR ? "stderr" : "stdout", "text", k_jstr(b->p, n));
  k_publish_locked(k, NULL, "stream", c);
  memmove(b->p, b->p + n, b->n - n);
  b->n -= n;
  I.stream_since = b->n ? now() : 0;
}

static void stream_flush(Kernel *k) {
  pthread_mutex_lock(&k->io_mu);
  stream_flush_locked(k, 1);
  pthread_mutex_unlock(&k->io_mu);
}

void interp_tick(Kernel *k) {
  pthread_mutex_lock(&k->io_mu);
  if (I.stream.n && k->cur_parent && now() - I.stream_since >= STREAM_INTERVAL) stream_flush_locked(k, 0);
  pthread_mutex_unlock(&k->io_mu);
}

/* %%all cells: the worker lines the session forwards ("[rank N] " is written
** on its own, then the line) stream live as usual and are also kept per rank;
** at the end of the cell one display_data shows them grouped by rank.  A
** partial line continued after another rank's output counts for that rank. */
#define BYRANK_MAX 1024
#define BYRANK_CAP (1u << 20)
static struct { int on, cur[2]; Buf b[BYRANK_MAX]; } ByRank;
static void byrank_feed(int stream, const char *data, size_t len) {
  int si = stream == NB_STDERR, r = -1, n = 0;
  if (len >= 9 && len < 32 && data[len - 1] == ' ' && data[0] == '[') {
    char tmp[32]; memcpy(tmp, data, len); tmp[len] = 0;
    if (sscanf(tmp, "[rank %d]%n", &r, &n) == 1 && (size_t)n + 1 == len && r >= 0 && r < BYRANK_MAX) { ByRank.cur[si] = r; return; }
  }
  if (ByRank.cur[si] < 0) return;
  Buf *b = &ByRank.b[ByRank.cur[si]];
  if (b->n < BYRANK_CAP) buf_add(b, data, len);
  if (len && data[len - 1] == '\n') ByRank.cur[si] = -1;   /* unprefixed output after it is the session's */
}
static void byrank_publish(Kernel *k) {
  Buf t = {0};
  pthread_mutex_lock(&k->io_mu);
  for (int r = 0; r < BYRANK_MAX; r++) {
    Buf *b = &ByRank.b[r];
    if (!b->n) continue;
    char h[48]; int hn = snprintf(h, sizeof h, "%s[rank %d]\n", t.n ? "\n" : "", r);
    buf_add(&t, h, (size_t)hn);
    buf_add(&t, b->p, b->n);
    if (b->p[b->n - 1] != '\n') buf_add(&t, "\n", 1);
    if (b->n >= BYRANK_CAP) buf_add(&t, "[...]\n", 6);
  }
  if (t.n && k->cur_parent)
    k_publish_locked(k, NULL, "display_data", json_pack("{s:{s:o}, s:{}, s:{}}", "data", "text/plain", k_jstr(t.p, t.n), "metadata", "transient"));
  free(t.p);
  for (int r = 0; r < BYRANK_MAX; r++) { free(ByRank.b[r].p); ByRank.b[r] = (Buf){0}; }
  ByRank.on = 0;
  pthread_mutex_unlock(&k->io_mu);
}

/* ------------------------------------------------------------ the sink */
static void sink_write(nb_Sink *s, int stream, const char *data, size_t len) {
  Kernel *k = s->ud;
  if (I.capture || !k->cur_parent) return;
  pthread_mutex_lock(&k->io_mu);
  if (ByRank.on) byrank_feed(stream, data, len);
  if (I.stream.n && I.stream_id != stream) stream_flush_locked(k, 1);
  if (!I.stream.n) I.stream_since = now();
  I.stream_id = stream;
  buf_add(&I.stream, data, len);
  if (now() - I.stream_since >= STREAM_INTERVAL || I.stream.n >= STREAM_MAX) stream_flush_locked(k, 0);
  pthread_mutex_unlock(&k->io_mu);
}

static const char b64chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static json_t *base64(const unsigned char *p, size_t n) {
  size_t on = (n + 2) / 3 * 4;
  char *o = malloc(on + 1);
  if (!o) abort();
  size_t j = 0;
  for (size_t i = 0; i < n; i += 3) {
    unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
    o[j++] = b64chars[v >> 18 & 63]; o[j++] = b64chars[v >> 12 & 63];
    o[j++] = i + 1 < n ? b64chars[v >> 6 & 63] : '=';
    o[j++] = i + 2 < n ? b64chars[v & 63] : '=';
  }
  json_t *r = json_stringn(o, j);
  free(o);
  return r;
}

static json_t *bundle(const nb_MimeItem *items, int n) {
  json_t *d = json_object();
  for (int i = 0; i < n; i++) {
    if (!items[i].mime || !items[i].data) continue;
    const unsigned char *p = (const unsigned char *)items[i].data;
    size_t len = items[i].len;
    json_t *v;
    /* binary images arrive raw (or already base64): JSON carries base64 */
    int raw_png = len >= 8 && !memcmp(p, "\x89PNG\r\n\x1a\n", 8);
    int raw_jpeg = len >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff;
    if ((!strcmp(items[i].mime, "image/png") && raw_png) || (!strcmp(items[i].mime, "image/jpeg") && raw_jpeg)) v = base64(p, len);
    else if (!strcmp(items[i].mime, "application/json")) {
      v = json_loadb(items[i].data, len, JSON_DECODE_ANY, NULL);
      if (!v) v = k_jstr(items[i].data, len);
    } else v = k_jstr(items[i].data, len);
    json_object_set_new(d, items[i].mime, v);
  }
  if (!json_object_get(d, "text/plain")) json_object_set_new(d, "text/plain", json_string(""));
  return d;
}

static void sink_display(nb_Sink *s, const nb_MimeItem *items, int n, const char *display_id, int update) {
  Kernel *k = s->ud;
  if (I.capture || !k->cur_parent) return;
  stream_flush(k);
  json_t *d = bundle(items, n);
  if (display_id)
    k_publish(k, NULL, update ? "update_display_data" : "display_data",
              json_pack("{s:o, s:{}, s:{s:s}}", "data", d, "metadata", "transient", "display_id", display_id));
  else
    k_publish(k, NULL, "display_data", json_pack("{s:o, s:{}, s:{}}", "data", d, "metadata", "transient"));
}

/* the cell's value: kept for the execute_result (or captured for user_expressions) */
static void sink_result(nb_Sink *s, const nb_MimeItem *items, int n) {
  Kernel *k = s->ud;
  if (I.capture) { json_decref(I.captured); I.captured = bundle(items, n); return; }
  if (!k->cur_parent || I.silent) return;
  json_decref(I.result);
  I.result = bundle(items, n);
}

static void sink_clear(nb_Sink *s, int wait) {
  Kernel *k = s->ud;
  if (I.capture || !k->cur_parent) return;
  stream_flush(k);
  k_publish(k, NULL, "clear_output", json_pack("{s:b}", "wait", wait));
}

static char *sink_input(nb_Sink *s, const char *prompt, int password) {
  Kernel *k = s->ud;
  if (I.capture || !I.allow_stdin || !I.req) return NULL;
  stream_flush(k);
  /* a reply from an earlier, abandoned request must not answer this one */
  for (;;) {
    wire_Msg old; char err[64];
    int rc = wire_recv(k->stdin_sock, &k->ws.auth, &old, ZMQ_DONTWAIT, err, sizeof err);
    if (rc == WIRE_ESYS) break;
    if (rc != WIRE_ESYS) wire_msg_free(&old);
  }
  if (wire_send(k->stdin_sock, &k->ws, I.req->ids, I.req->nids, NULL, I.req->header_raw, I.req->header_len,
                "input_request", json_pack("{s:o, s:b}", "prompt", k_jstr(prompt, strlen(prompt)), "password", password), NULL)) {
    k_log("stdin: cannot send input_request: %s", zmq_strerror(errno));
    return NULL;
  }
  for (;;) {
    if (k->interrupted || atomic_load(&k->stop)) return NULL;
    zmq_pollitem_t it = { k->stdin_sock, 0, ZMQ_POLLIN, 0 };
    int r = zmq_poll(&it, 1, 50);
    if (r < 0) { if (errno == EINTR) continue; return NULL; }
    if (r == 0) continue;
    wire_Msg m; char err[256];
    int rc = wire_recv(k->stdin_sock, &k->ws.auth, &m, ZMQ_DONTWAIT, err, sizeof err);
    if (rc == WIRE_ESYS) { if (errno == EAGAIN || errno == EINTR) continue; return NULL; }
    if (rc != WIRE_OK) { k_log("stdin: dropped message: %s: %s", wire_strerror(rc), err); wire_msg_free(&m); continue; }
    if (strcmp(m.msg_type, "input_reply")) { k_log("stdin: ignored %s", m.msg_type); wire_msg_free(&m); continue; }
    json_t *v = json_object_get(m.content, "value");
    char *r2 = NULL;
    if (json_is_string(v)) {
      size_t n = json_string_length(v);
      r2 = malloc(n + 1);
      if (!r2) abort();
      memcpy(r2, json_string_value(v), n); r2[n] = 0;
    } else k_log("stdin: input_reply without a string value");
    wire_msg_free(&m);
    return r2;
  }
}

/* ------------------------------------------------------------ history */
static char *history_file(void) {
  const char *env = getenv("NABLA_HISTORY_FILE");
  if (env) return *env ? strdup(env) : NULL;   /* "" turns persistence off */
  const char *xdg = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
  char dir[4096];
  if (xdg && *xdg) snprintf(dir, sizeof dir, "%s/nabla", xdg);
  else if (home && *home) snprintf(dir, sizeof dir, "%s/.local/share/nabla", home);
  else return NULL;
  /* mkdir -p */
  for (char *p = dir + 1; *p; p++) if (*p == '/') { *p = 0; mkdir(dir, 0700); *p = '/'; }
  mkdir(dir, 0700);
  size_t n = strlen(dir) + 32;
  char *path = malloc(n);
  if (path) snprintf(path, n, "%s/kernel_history.jsonl", dir);
  return path;
}

static void hist_push(int session, int line, const char *in, size_t inlen, const char *out) {
  if (I.nhist == I.caphist) {
    I.caphist = I.caphist ? I.caphist * 2 : 64;
    I.hist = realloc(I.hist, sizeof *I.hist * (size_t)I.caphist);
    if (!I.hist) abort();
  }
  HEntry *e = &I.hist[I.nhist++];
  e->session = session; e->line = line;
  e->input = malloc(inlen + 1);
  if (!e->input) abort();
  memcpy(e->input, in, inlen); e->input[inlen] = 0;
  e->output = out ? strdup(out) : NULL;
}

static json_t *hist_json(const HEntry *e) {
  return json_pack("[i, i, o, o]", e->session, e->line, k_jstr(e->input, strlen(e->input)),
                   e->output ? k_jstr(e->output, strlen(e->output)) : json_null());
}

/* Rewrites the file with the newest HISTORY_MAX entries (atomically: temp +
** fsync + rename).  The temporary file is mkstemp's (0600, whatever the
** umask): the history holds user data and stays private. */
static void hist_compact(void) {
  if (!I.hist_path) return;
  size_t n = strlen(I.hist_path) + 32;
  char *tmp = malloc(n);
  if (!tmp) return;
  snprintf(tmp, n, "%s.XXXXXX", I.hist_path);
  int fd = mkstemp(tmp);
  if (fd >= 0) fchmod(fd, 0600);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (fd >= 0 && !f) close(fd);
  if (fd < 0) { free(tmp); return; }
  if (f) {
    int from = I.nhist > HISTORY_MAX ? I.nhist - HISTORY_MAX : 0;
    for (int i = from; i < I.nhist; i++) {
      json_t *j = hist_json(&I.hist[i]);
      char *s = json_dumps(j, JSON_COMPACT);
      if (s) { fputs(s, f); fputc('\n', f); free(s); }
      json_decref(j);
    }
    int ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (fclose(f) == 0 && ok && rename(tmp, I.hist_path) == 0) { free(tmp); return; }
  }
  unlink(tmp);
  free(tmp);
}

static void hist_load(void) {
  if (I.hist_loaded) return;
  I.hist_loaded = 1;
  I.session = 1;
  I.hist_path = history_file();
  if (!I.hist_path) return;
  FILE *f = fopen(I.hist_path, "r");
  if (!f) return;
  /* user data: private, also when an older version left it readable to others */
  struct stat sb;
  if (fstat(fileno(f), &sb) == 0 && (sb.st_mode & 077) && fchmod(fileno(f), 0600))
    k_log("history: %s is readable by others and cannot be made private: %s", I.hist_path, strerror(errno));
  char *line = NULL; size_t cap = 0; ssize_t len;
  int maxs = 0;
  while ((len = getline(&line, &cap, f)) > 0) {
    json_t *j = json_loadb(line, (size_t)len, 0, NULL);
    json_t *s = json_array_get(j, 0), *l = json_array_get(j, 1), *in = json_array_get(j, 2), *out = json_array_get(j, 3);
    if (json_is_integer(s) && json_is_integer(l) && json_is_string(in)) {
      hist_push((int)json_integer_value(s), (int)json_integer_value(l), json_string_value(in), json_string_length(in),
                json_is_string(out) ? json_string_value(out) : NULL);
      if (json_integer_value(s) > maxs) maxs = (int)json_integer_value(s);
    }
    json_decref(j);
  }
  free(line);
  fclose(f);
  I.session = maxs + 1;
  if (I.nhist > HISTORY_MAX * 2) {   /* keep the file bounded */
    int drop = I.nhist - HISTORY_MAX;
    for (int i = 0; i < drop; i++) { free(I.hist[i].input); free(I.hist[i].output); }
    memmove(I.hist, I.hist + drop, sizeof *I.hist * (size_t)(I.nhist - drop));
    I.nhist -= drop;
    hist_compact();
  }
}

static void hist_store(int line, const char *in, size_t inlen, const char *out) {
  hist_load();
  hist_push(I.session, line, in, inlen, out);
  if (!I.hist_path) return;
  /* one append per entry (O_APPEND): kernels running side by side do not clobber each other */
  json_t *j = hist_json(&I.hist[I.nhist - 1]);
  char *s = json_dumps(j, JSON_COMPACT);
  json_decref(j);
  if (!s) return;
  size_t n = strlen(s);
  s[n] = '\n';
  int fd = open(I.hist_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd >= 0) { if (write(fd, s, n + 1) < 0) k_log("history: cannot write %s: %s", I.hist_path, strerror(errno)); close(fd); }
  free(s);
}

static json_t *hist_item(const HEntry *e, int output) {
  if (!output) return json_pack("[i, i, o]", e->session, e->line, k_jstr(e->input, strlen(e->input)));
  return json_pack("[i, i, [o, o]]", e->session, e->line, k_jstr(e->input, strlen(e->input)),
                   e->output ? k_jstr(e->output, strlen(e->output)) : json_null());
}

static json_t *history_request(json_t *c) {
  hist_load();
  json_t *out = json_array();
  int output = json_is_true(json_object_get(c, "output"));
  const char *type = json_string_value(json_object_get(c, "hist_access_type"));
  json_t *jn = json_object_get(c, "n");
  long n = json_is_integer(jn) ? (long)json_integer_value(jn) : json_is_real(jn) ? (long)json_real_value(jn) : -1;
  if (!type || !strcmp(type, "tail")) {
    if (n < 0) n = 10;
    int from = (int)(I.nhist > n ? I.nhist - n : 0);
    for (int i = from; i < I.nhist; i++) json_array_append_new(out, hist_item(&I.hist[i], output));
  } else if (!strcmp(type, "range")) {
    json_t *js = json_object_get(c, "session"), *ja = json_object_get(c, "start"), *jb = json_object_get(c, "stop");
    long session = json_is_number(js) ? (long)json_number_value(js) : 0;
    if (session <= 0) session += I.session;   /* 0: this session; -1: the one before */
    long start = json_is_number(ja) ? (long)json_number_value(ja) : 0;
    long stop = json_is_number(jb) ? (long)json_number_value(jb) : -1;
    for (int i = 0; i < I.nhist; i++) {
      const HEntry *e = &I.hist[i];
      if (e->session == session && e->line >= start && (stop < 0 || e->line < stop))
        json_array_append_new(out, hist_item(e, output));
    }
  } else if (!strcmp(type, "search")) {
    const char *pat = json_string_value(json_object_get(c, "pattern"));
    if (!pat) pat = "*";
    int unique = json_is_true(json_object_get(c, "unique"));
    /* newest first while collecting, so `n` keeps the latest matches */
    json_t *rev = json_array();
    for (int i = I.nhist - 1; i >= 0 && (n < 0 || (long)json_array_size(rev) < n); i--) {
      const HEntry *e = &I.hist[i];
      if (fnmatch(pat, e->input, 0) != 0) continue;
      if (unique) {
        int dup = 0;
        for (int j = i + 1; j < I.nhist && !dup; j++)
          if (!strcmp(I.hist[j].input, e->input) && fnmatch(pat, I.hist[j].input, 0) == 0) dup = 1;
        if (dup) continue;
      }
      json_array_append_new(rev, hist_item(e, output));
    }
    for (size_t i = json_array_size(rev); i-- > 0;) json_array_append(out, json_array_get(rev, i));
    json_decref(rev);
  }
  return json_pack("{s:s, s:o}", "status", "ok", "history", out);
}

/* ------------------------------------------------------------ helpers */
static json_t *error_content(const nb_ErrorInfo *e) {
  json_t *tb = json_array();
  const char *r = e && e->report ? e->report : "";
  while (*r) {
    const char *nl = strchr(r, '\n');
    size_t n = nl ? (size_t)(nl - r) : strlen(r);
    json_array_append_new(tb, k_jstr(r, n));
    r += n + (nl ? 1 : 0);
  }
  const char *name = e && e->name ? e->name : "Error", *msg = e && e->message ? e->message : "";
  return json_pack("{s:s, s:s, s:o, s:o}", "status", "error", "ename", name, "evalue", k_jstr(msg, strlen(msg)), "traceback", tb);
}

static json_t *bad_request(const char *what) {
  return json_pack("{s:s, s:s, s:s, s:[s]}", "status", "error", "ename", "BadRequest", "evalue", what, "traceback", what);
}

/* A BadRequest reply content when the string jcode holds a NUL (JSON allows
** "\u0000"; source text cannot hold it, and C strings would cut it there
** silently), else NULL. */
static json_t *nul_in_code(json_t *jcode, const char *request) {
  if (!json_is_string(jcode)) return NULL;
  const char *code = json_string_value(jcode), *nul = memchr(code, 0, json_string_length(jcode));
  if (!nul) return NULL;
  char ev[200];
  snprintf(ev, sizeof ev, "%s: the code contains a NUL character (at byte %zu); source text cannot", request, (size_t)(nul - code));
  k_log("%s", ev);
  return bad_request(ev);
}

/* field checks: -1 when present with the wrong type */
static int get_bool(json_t *c, const char *key, int dflt) {
  json_t *v = json_object_get(c, key);
  if (!v || json_is_null(v)) return dflt;
  if (!json_is_boolean(v)) return -1;
  return json_is_true(v);
}


/* `?name`, `name?` and `%help name` (dist/dmagic.c): the documentation as a
** pager payload of the execute_reply, where Jupyter front ends show it */
static void help_page(void *ud, const char *text) {
  json_array_append_new((json_t *)ud, json_pack("{s:s, s:{s:o}, s:i}", "source", "page", "data", "text/plain",
                                                k_jstr(text, strlen(text)), "start", 0));
}

/* ------------------------------------------------------------ execute */
static void execute(Kernel *k, wire_Msg *m) {
  json_t *c = m->content, *jcode = json_object_get(c, "code");
  json_t *uexp = json_object_get(c, "user_expressions");
  int silent = get_bool(c, "silent", 0);
  int store = get_bool(c, "store_history", silent != 1);
  int allow_stdin = get_bool(c, "allow_stdin", 0);
  int stop_on_error = get_bool(c, "stop_on_error", 1);
  if (!json_is_string(jcode) || silent < 0 || store < 0 || allow_stdin < 0 || stop_on_error < 0 ||
      (uexp && !json_is_null(uexp) && !json_is_object(uexp))) {
    k_log("execute_request with missing or mistyped fields");
    json_t *r = bad_request("execute_request: 'code' must be a string; silent, store_history, allow_stdin, stop_on_error booleans; user_expressions an object");
    json_object_set_new(r, "execution_count", json_integer(I.exec_count));
    wire_reply(k->shell, &k->ws, m, "execute_reply", r);
    return;
  }
  if (silent) store = 0;
  const char *code = json_string_value(jcode);
  size_t len = json_string_length(jcode);
  json_t *r = nul_in_code(jcode, "execute_request");
  if (r) {
    json_object_set_new(r, "execution_count", json_integer(I.exec_count));
    wire_reply(k->shell, &k->ws, m, "execute_reply", r);
    return;
  }
  if (store) I.exec_count++;
  int count = I.exec_count;
  if (!silent) k_publish(k, m, "execute_input", json_pack("{s:O, s:i}", "code", jcode, "execution_count", count));

  I.req = m; I.allow_stdin = allow_stdin; I.silent = silent;
  json_t *payload = json_array();
  int st = 0, usage = 0;
  const nb_ErrorInfo *err = NULL;
  char name[32]; snprintf(name, sizeof name, "<cell %d>", count);
  /* a %%all cell's output is shown grouped by rank at its end */
  size_t skip = strspn(code, " \t\r\n");
  if (!strncmp(code + skip, "%%all", 5) && (code[skip + 5] == '\n' || code[skip + 5] == 0 || code[skip + 5] == '\r')) {
    ByRank.on = !silent; ByRank.cur[0] = ByRank.cur[1] = -1;
  }
  k->interrupted = 0;
  k->running = 1;
  /* the magics (dist/dmagic.c, the same as the REPL's); help goes to the pager */
  int mst = 0;
  if (nbD_magic(k->vm, code, len, silent ? 0 : NB_ECHO_LAST, &mst, help_page, payload)) { st = mst == 1; usage = mst == 2; }
  else st = nb_run(k->vm, code, len, name, silent ? 0 : NB_ECHO_LAST);
  k->running = 0;
  err = st ? nb_last_error(k->vm) : NULL;
  stream_flush(k);
  if (ByRank.on) byrank_publish(k);
  char *result_text = NULL;
  if (I.result) {
    json_t *d = I.result; I.result = NULL;
    if (!st) {
      const char *t = json_string_value(json_object_get(d, "text/plain"));
      if (t) result_text = strdup(t);
      k_publish(k, NULL, "execute_result", json_pack("{s:i, s:o, s:{}}", "execution_count", count, "data", d, "metadata"));
    } else json_decref(d);
  }
  json_t *reply;
  if (usage) {   /* a magic used wrongly: its message went to stderr */
    reply = json_pack("{s:s, s:s, s:s, s:[s]}", "status", "error", "ename", "UsageError", "evalue",
                      "a magic was used wrongly (see the message above; %help lists them)", "traceback", "UsageError: see the message above");
    json_t *pub = json_deep_copy(reply);
    json_object_del(pub, "status");
    k_publish(k, NULL, "error", pub);
    json_object_set_new(reply, "execution_count", json_integer(count));
  } else if (st) {
    reply = error_content(err);
    json_t *pub = json_deep_copy(reply);
    json_object_del(pub, "status");
    k_publish(k, NULL, "error", pub);
    json_object_set_new(reply, "execution_count", json_integer(count));
  } else {
    reply = json_pack("{s:s, s:i}", "status", "ok", "execution_count", count);
  }
  if (store) hist_store(count, code, len, result_text);
  free(result_text);
  json_object_set_new(reply, "payload", payload);
  /* user_expressions: each evaluated on its own, its value as a text/plain bundle */
  json_t *ures = json_object();
  if (json_is_object(uexp)) {
    const char *key; json_t *v;
    I.capture = 1;
    json_object_foreach(uexp, key, v) {
      if (!json_is_string(v)) { json_object_set_new(ures, key, bad_request("user expression must be a string")); continue; }
      json_t *nul = nul_in_code(v, "user_expressions");
      if (nul) { json_object_set_new(ures, key, nul); continue; }
      json_decref(I.captured); I.captured = NULL;
      k->running = 1;
      int est = nb_run(k->vm, json_string_value(v), json_string_length(v), "<user_expression>", NB_ECHO_LAST);
      k->running = 0;
      if (est) json_object_set_new(ures, key, error_content(nb_last_error(k->vm)));
      else {
        json_t *d = I.captured ? I.captured : json_pack("{s:s}", "text/plain", "nil");
        I.captured = NULL;
        json_object_set_new(ures, key, json_pack("{s:s, s:o, s:{}}", "status", "ok", "data", d, "metadata"));
      }
    }
    I.capture = 0;
    json_decref(I.captured); I.captured = NULL;
  }
  json_object_set_new(reply, "user_expressions", ures);
  I.req = NULL; I.allow_stdin = 0;
  /* before the reply: what a client sends after seeing it must not be aborted */
  if (st && stop_on_error) k_abort_queued(k);
  wire_reply(k->shell, &k->ws, m, "execute_reply", reply);
}

/* ------------------------------------------------------------ the rest */
static int get_cursor(json_t *c, const char *code, size_t len, size_t *byte) {
  json_t *cp = json_object_get(c, "cursor_pos");
  if (!cp || json_is_null(cp)) { *byte = len; return 0; }
  if (!json_is_number(cp)) return -1;
  double v = json_number_value(cp);
  *byte = v <= 0 ? 0 : cp_to_byte(code, len, (long)(v > 1e9 ? 1e9 : v));
  return 0;
}

static void complete(Kernel *k, wire_Msg *m) {
  json_t *jcode = json_object_get(m->content, "code");
  json_t *nul = nul_in_code(jcode, "complete_request");
  if (nul) { wire_reply(k->shell, &k->ws, m, "complete_reply", nul); return; }
  size_t cur;
  if (!json_is_string(jcode) || get_cursor(m->content, json_string_value(jcode), json_string_length(jcode), &cur)) {
    wire_reply(k->shell, &k->ws, m, "complete_reply", bad_request("complete_request: 'code' must be a string and 'cursor_pos' a number"));
    return;
  }
  const char *code = json_string_value(jcode);
  size_t len = strlen(code);   /* the language sees the text up to an embedded NUL */
  if (cur > len) cur = len;
  nb_Completions cs = {0};
  nb_complete(k->vm, code, (int)cur, &cs);
  json_t *matches = json_array();
  for (int i = 0; i < cs.n; i++) json_array_append_new(matches, k_jstr(cs.items[i], strlen(cs.items[i])));
  size_t s = cs.start < 0 ? cur : (size_t)cs.start, e = cs.end < 0 ? cur : (size_t)cs.end;
  if (s > len) s = len;
  if (e > len) e = len;
  if (e < s) e = s;
  nb_completions_free(&cs);
  wire_reply(k->shell, &k->ws, m, "complete_reply",
             json_pack("{s:s, s:o, s:I, s:I, s:{}}", "status", "ok", "matches", matches,
                       "cursor_start", (json_int_t)byte_to_cp(code, len, s), "cursor_end", (json_int_t)byte_to_cp(code, len, e), "metadata"));
}

static void inspect(Kernel *k, wire_Msg *m) {
  json_t *jcode = json_object_get(m->content, "code");
  json_t *nul = nul_in_code(jcode, "inspect_request");
  if (nul) { wire_reply(k->shell, &k->ws, m, "inspect_reply", nul); return; }
  size_t cur;
  if (!json_is_string(jcode) || get_cursor(m->content, json_string_value(jcode), json_string_length(jcode), &cur)) {
    wire_reply(k->shell, &k->ws, m, "inspect_reply", bad_request("inspect_request: 'code' must be a string and 'cursor_pos' a number"));
    return;
  }
  const char *code = json_string_value(jcode);
  size_t len = strlen(code);
  if (cur > len) cur = len;
  char *doc = nb_inspect(k->vm, code, (int)cur);
  json_t *data = json_object();
  if (doc) json_object_set_new(data, "text/plain", k_jstr(doc, strlen(doc)));
  free(doc);
  wire_reply(k->shell, &k->ws, m, "inspect_reply",
             json_pack("{s:s, s:b, s:o, s:{}}", "status", "ok", "found", json_object_size(data) > 0, "data", data, "metadata"));
}

static void is_complete(Kernel *k, wire_Msg *m) {
  json_t *jcode = json_object_get(m->content, "code");
  json_t *nul = nul_in_code(jcode, "is_complete_request");
  if (nul) { wire_reply(k->shell, &k->ws, m, "is_complete_reply", nul); return; }
  if (!json_is_string(jcode)) {
    wire_reply(k->shell, &k->ws, m, "is_complete_reply", json_pack("{s:s}", "status", "unknown"));
    return;
  }
  const char *indent = NULL;
  nb_Completeness c = nb_is_complete(json_string_value(jcode), &indent);
  json_t *r;
  if (c == NB_INCOMPLETE) r = json_pack("{s:s, s:s}", "status", "incomplete", "indent", indent ? indent : "");
  else r = json_pack("{s:s}", "status", c == NB_COMPLETE ? "complete" : "invalid");
  wire_reply(k->shell, &k->ws, m, "is_complete_reply", r);
}

static int unauthenticated;   /* set once at start-up, before the threads */
void interp_set_unauthenticated(int on) { unauthenticated = on; }

json_t *interp_kernel_info(void) {
  char banner[400];
  snprintf(banner, sizeof banner, "Nabla %s: an array language with tensors and autograd%s", nb_version(),
           unauthenticated ? "\nWARNING: this kernel runs without a key: its messages are not authenticated, and anyone"
                             " who can reach its ports can run code as you." : "");
  /* help_links stays empty until the project has a documentation URL (docs/ is in the repository) */
  return json_pack("{s:s, s:s, s:s, s:s, s:s, s:b, s:[],"
                   " s:{s:s, s:s, s:s, s:s, s:s, s:s, s:s}}",
                   "status", "ok", "protocol_version", WIRE_PROTOCOL_VERSION, "implementation", "nabla",
                   "implementation_version", nb_version(), "banner", banner, "debugger", 0,
                   "help_links",
                   "language_info", "name", "nabla", "version", nb_version(), "mimetype", "text/x-nabla",
                   "file_extension", ".nbl", "pygments_lexer", "text", "codemirror_mode", "python",
                   "nbconvert_exporter", "script");
}

void interp_shell(Kernel *k, wire_Msg *m) {
  const char *t = m->msg_type;
  pthread_mutex_lock(&k->io_mu);
  free(k->cur_parent);
  k->cur_parent = strdup(m->header_raw);
  k->cur_parent_len = m->header_len;
  pthread_mutex_unlock(&k->io_mu);
  k_status(k, m, "busy");
  if (!strcmp(t, "execute_request")) execute(k, m);
  else if (!strcmp(t, "kernel_info_request")) wire_reply(k->shell, &k->ws, m, "kernel_info_reply", interp_kernel_info());
  else if (!strcmp(t, "complete_request")) complete(k, m);
  else if (!strcmp(t, "inspect_request")) inspect(k, m);
  else if (!strcmp(t, "is_complete_request")) is_complete(k, m);
  else if (!strcmp(t, "history_request")) wire_reply(k->shell, &k->ws, m, "history_reply", history_request(m->content));
  else if (!strcmp(t, "comm_info_request")) wire_reply(k->shell, &k->ws, m, "comm_info_reply", json_pack("{s:s, s:{}}", "status", "ok", "comms"));
  else if (!strcmp(t, "comm_open")) {
    /* no comm targets: tell the frontend the comm is closed */
    json_t *id = json_object_get(m->content, "comm_id");
    const char *tn = json_string_value(json_object_get(m->content, "target_name"));
    k_log("comm_open for unknown target '%s': closing it", tn ? tn : "?");
    if (json_is_string(id)) k_publish(k, m, "comm_close", json_pack("{s:O, s:{}}", "comm_id", id, "data"));
  } else if (!strcmp(t, "comm_msg") || !strcmp(t, "comm_close")) {
    k_log("%s for an unknown comm (ignored)", t);
  } else if (!strcmp(t, "connect_request")) {
    wire_reply(k->shell, &k->ws, m, "connect_reply",
               json_pack("{s:s, s:i, s:i, s:i, s:i, s:i}", "status", "ok", "shell_port", k->ports[0], "iopub_port", k->ports[1],
                         "stdin_port", k->ports[2], "control_port", k->ports[3], "hb_port", k->ports[4]));
  } else if (!strcmp(t, "shutdown_request")) {
    k->restart = json_is_true(json_object_get(m->content, "restart"));
    wire_reply(k->shell, &k->ws, m, "shutdown_reply", json_pack("{s:s, s:b}", "status", "ok", "restart", k->restart));
    k_publish(k, m, "shutdown_reply", json_pack("{s:s, s:b}", "status", "ok", "restart", k->restart));
    atomic_store(&k->stop, 1);
  } else if (!strcmp(t, "interrupt_request")) {
    wire_reply(k->shell, &k->ws, m, "interrupt_reply", json_pack("{s:s}", "status", "ok"));
  } else k_unknown(k, k->shell, m);
  k_status(k, m, "idle");
  pthread_mutex_lock(&k->io_mu);
  free(k->cur_parent); k->cur_parent = NULL; k->cur_parent_len = 0;
  pthread_mutex_unlock(&k->io_mu);
}

void interp_init(Kernel *k) {
  memset(&I, 0, sizeof I);
  I.k = k;
  I.sink.write = sink_write;
  I.sink.display = sink_display;
  I.sink.rich = 1;
  I.sink.clear = sink_clear;
  I.sink.input = sink_input;
  I.sink.result = sink_result;
  I.sink.ud = k;
  k->vm = nb_vm_new(&I.sink);
  static char *argv0[] = { "<kernel>" };
  nb_vm_set_argv(k->vm, 1, argv0);
  nb_vm_add_path(k->vm, ".");
}

void interp_free(Kernel *k) {
  nb_vm_free(k->vm);
  k->vm = NULL;
  json_decref(I.result);
  json_decref(I.captured);
  free(I.stream.p);
  for (int i = 0; i < I.nhist; i++) { free(I.hist[i].input); free(I.hist[i].output); }
  free(I.hist);
  free(I.hist_path);
  memset(&I, 0, sizeof I);
}
