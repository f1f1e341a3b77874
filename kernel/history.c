/*
** history.c — the kernel's history (history_request: tail, range, search),
** kept in memory and appended to a JSON-lines file that outlives the kernel
** ($NABLA_HISTORY_FILE, else $XDG_DATA_HOME/nabla or ~/.local/share/nabla/
** kernel_history.jsonl).  A session is one kernel process: session numbers
** continue from the highest in the file.  Loaded lazily, at the first cell
** stored or the first request, so a kernel that never uses it never reads it.
** Main thread only (the shell requests and the cells are served there).
*/
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "kernel/kint.h"

#define HISTORY_MAX 10000
/* Bounds on what one entry and the whole history keep, so that cells
** returning huge values (six 32 MiB strings added 192 MB to the file and
** the RSS) cost little: an output is kept up to HIST_OUTPUT_MAX bytes and an
** input up to HIST_INPUT_MAX (cut at a character, with a note of the full
** size); compaction keeps the newest entries up to HISTORY_MAX of them and
** HISTORY_BYTES in all; a start reads at most the file's last
** HISTORY_FILE_READ bytes (an older, bigger file is read from its tail). */
#define HIST_OUTPUT_MAX ((size_t)4 << 10)
#define HIST_INPUT_MAX ((size_t)256 << 10)
#define HISTORY_BYTES ((size_t)32 << 20)
#define HISTORY_FILE_READ ((off_t)64 << 20)

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

/* The entries' text lives in an arena of mmap'd blocks, not on malloc's
** heap.  A kernel stores an entry after every cell, and a small string
** malloc'd then lands in a page that the cell's freed temporaries left
** behind, where it pins the page: the kernel's RSS grew 4.6 KB per cell for
** ~100 bytes of history (issue 33).  In the arena the history's pages hold
** history only.  Entries are dropped by copying the kept ones into a fresh
** arena (hist_drop). */
struct HBlock { HBlock *next; size_t used, cap; char data[]; };
#define HIST_BLOCK ((size_t)256 << 10)

static char *arena_alloc(HBlock **head, size_t n) {
  HBlock *b = *head;
  if (!b || b->cap - b->used < n) {
    bool own = n > HIST_BLOCK / 4;   /* a big text gets a block of its own; the current one stays open */
    size_t cap = own ? n : HIST_BLOCK - sizeof *b;
    void *m = mmap(NULL, sizeof *b + cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) abort();
    b = m; b->used = 0; b->cap = cap;
    if (own && *head) { b->next = (*head)->next; (*head)->next = b; }
    else { b->next = *head; *head = b; }
  }
  char *p = b->data + b->used;
  b->used += n;
  return p;
}

static void arena_free(HBlock *b) {
  while (b) { HBlock *next = b->next; munmap(b, sizeof *b + b->cap); b = next; }
}

/* s[0..len) kept whole when len <= max, else its first max bytes (back to a
** UTF-8 character's start) and a note of the full size; in h's arena */
static char *bounded_copy(KHistory *h, const char *s, size_t len, size_t max) {
  size_t keep = len;
  if (len > max) { keep = max; while (keep && ((unsigned char)s[keep] & 0xC0) == 0x80) keep--; }
  char note[64] = "";
  if (keep < len) snprintf(note, sizeof note, "\n... (%zu bytes in all)", len);
  size_t nn = strlen(note);
  char *c = arena_alloc(&h->text, keep + nn + 1);
  memcpy(c, s, keep); memcpy(c + keep, note, nn + 1);
  h->bytes += keep + nn + 16;
  return c;
}

static void hist_push(KHistory *h, int session, int line, const char *in, size_t inlen, const char *out) {
  if (h->n == h->cap) {
    h->cap = h->cap ? h->cap * 2 : 64;
    h->e = realloc(h->e, sizeof *h->e * (size_t)h->cap);
    if (!h->e) abort();
  }
  HEntry *e = &h->e[h->n++];
  e->session = session; e->line = line;
  e->input = bounded_copy(h, in, inlen, HIST_INPUT_MAX);
  e->output = out ? bounded_copy(h, out, strlen(out), HIST_OUTPUT_MAX) : NULL;
}

/* drops the oldest `drop` entries: the others' text is copied to a fresh arena */
static void hist_drop(KHistory *h, int drop) {
  HBlock *old = h->text;
  h->text = NULL; h->bytes = 0;
  for (int i = drop; i < h->n; i++) {
    HEntry *e = &h->e[i];
    e->input = bounded_copy(h, e->input, strlen(e->input), SIZE_MAX);   /* already bounded: copied whole */
    if (e->output) e->output = bounded_copy(h, e->output, strlen(e->output), SIZE_MAX);
  }
  arena_free(old);
  memmove(h->e, h->e + drop, sizeof *h->e * (size_t)(h->n - drop));
  h->n -= drop;
}

/* the index of the oldest entry compaction keeps: at most HISTORY_MAX
** entries and HISTORY_BYTES of text, the newest ones */
static int hist_keep_from(const KHistory *h) {
  size_t bytes = 0;
  int from = h->n;
  while (from > 0 && h->n - from < HISTORY_MAX) {
    const HEntry *e = &h->e[from - 1];
    bytes += strlen(e->input) + (e->output ? strlen(e->output) : 0) + 16;
    if (bytes > HISTORY_BYTES) break;
    from--;
  }
  return from;
}

static json_t *hist_json(const HEntry *e) {
  return json_pack("[i, i, o, o]", e->session, e->line, k_jstr(e->input, strlen(e->input)),
                   e->output ? k_jstr(e->output, strlen(e->output)) : json_null());
}

/* Rewrites the file with the newest HISTORY_MAX entries (atomically: temp +
** fsync + rename).  The temporary file is mkstemp's (0600, whatever the
** umask): the history holds user data and stays private. */
static void hist_compact(KHistory *h) {
  if (!h->path) return;
  size_t n = strlen(h->path) + 32;
  char *tmp = malloc(n);
  if (!tmp) return;
  snprintf(tmp, n, "%s.XXXXXX", h->path);
  int fd = mkstemp(tmp);
  if (fd >= 0) fchmod(fd, 0600);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (fd >= 0 && !f) close(fd);
  if (fd < 0) { free(tmp); return; }
  if (f) {
    for (int i = hist_keep_from(h); i < h->n; i++) {
      json_t *j = hist_json(&h->e[i]);
      char *s = json_dumps(j, JSON_COMPACT);
      if (s) { fputs(s, f); fputc('\n', f); free(s); }
      json_decref(j);
    }
    int ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (fclose(f) == 0 && ok && rename(tmp, h->path) == 0) { free(tmp); return; }
  }
  unlink(tmp);
  free(tmp);
}

static void hist_load(KHistory *h) {
  if (h->loaded) return;
  h->loaded = 1;
  h->session = 1;
  h->path = history_file();
  if (!h->path) return;
  FILE *f = fopen(h->path, "r");
  if (!f) return;
  /* user data: private, also when an older version left it readable to others */
  struct stat sb;
  if (fstat(fileno(f), &sb) == 0 && (sb.st_mode & 077) && fchmod(fileno(f), 0600))
    k_log("history: %s is readable by others and cannot be made private: %s", h->path, strerror(errno));
  char *line = NULL; size_t cap = 0; ssize_t len;
  int maxs = 0;
  bool tail = false;
  if (fstat(fileno(f), &sb) == 0 && sb.st_size > HISTORY_FILE_READ) {
    /* the tail only (a partial first line is skipped): an old, huge file
    ** costs at most this much at a start; the compaction below rewrites it */
    tail = fseeko(f, sb.st_size - HISTORY_FILE_READ, SEEK_SET) == 0 && getline(&line, &cap, f) > 0;
  }
  while ((len = getline(&line, &cap, f)) > 0) {
    json_t *j = json_loadb(line, (size_t)len, 0, NULL);
    json_t *s = json_array_get(j, 0), *l = json_array_get(j, 1), *in = json_array_get(j, 2), *out = json_array_get(j, 3);
    if (json_is_integer(s) && json_is_integer(l) && json_is_string(in)) {
      hist_push(h, (int)json_integer_value(s), (int)json_integer_value(l), json_string_value(in), json_string_length(in),
                json_is_string(out) ? json_string_value(out) : NULL);
      if (json_integer_value(s) > maxs) maxs = (int)json_integer_value(s);
    }
    json_decref(j);
  }
  free(line);
  fclose(f);
  h->session = maxs + 1;
  if (tail || h->n > HISTORY_MAX * 2 || h->bytes > 2 * HISTORY_BYTES) {   /* keep the file bounded */
    hist_drop(h, hist_keep_from(h));
    hist_compact(h);
  }
}

void khist_store(KHistory *h, int line, const char *in, size_t inlen, const char *out) {
  hist_load(h);
  hist_push(h, h->session, line, in, inlen, out);
  /* a kernel driven for 100,000 cells keeps the newest HISTORY_MAX entries
  ** (HISTORY_BYTES) in memory too, as the file does after compaction */
  if (h->n > HISTORY_MAX * 2 || h->bytes > 2 * HISTORY_BYTES) {
    hist_drop(h, hist_keep_from(h));
    hist_compact(h);
    return;   /* the compacted file has this entry */
  }
  if (!h->path) return;
  /* one append per entry (O_APPEND): kernels running side by side do not clobber each other */
  json_t *j = hist_json(&h->e[h->n - 1]);
  char *s = json_dumps(j, JSON_COMPACT);
  json_decref(j);
  if (!s) return;
  size_t n = strlen(s);
  s[n] = '\n';
  int fd = open(h->path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd >= 0) { if (write(fd, s, n + 1) < 0) k_log("history: cannot write %s: %s", h->path, strerror(errno)); close(fd); }
  free(s);
}

static json_t *hist_item(const HEntry *e, int output) {
  if (!output) return json_pack("[i, i, o]", e->session, e->line, k_jstr(e->input, strlen(e->input)));
  return json_pack("[i, i, [o, o]]", e->session, e->line, k_jstr(e->input, strlen(e->input)),
                   e->output ? k_jstr(e->output, strlen(e->output)) : json_null());
}

/* a request's number as a long: dflt when absent or not a number (NaN
** included), clamped to +-2^31 (a double such as 1e300 cast to long is
** undefined) */
static long json_count(json_t *j, long dflt) {
  double d;
  if (json_is_integer(j)) d = (double)json_integer_value(j);
  else if (json_is_real(j)) d = json_real_value(j);
  else return dflt;
  if (d != d) return dflt;
  if (d > 2147483647.0) return 2147483647L;
  if (d < -2147483648.0) return -2147483648L;
  return (long)d;
}

json_t *khist_request(KHistory *h, json_t *c) {
  hist_load(h);
  json_t *out = json_array();
  int output = json_is_true(json_object_get(c, "output"));
  const char *type = json_string_value(json_object_get(c, "hist_access_type"));
  long n = json_count(json_object_get(c, "n"), -1);
  if (!type || !strcmp(type, "tail")) {
    if (n < 0) n = 10;
    int from = (int)(h->n > n ? h->n - n : 0);
    for (int i = from; i < h->n; i++) json_array_append_new(out, hist_item(&h->e[i], output));
  } else if (!strcmp(type, "range")) {
    json_t *js = json_object_get(c, "session"), *ja = json_object_get(c, "start"), *jb = json_object_get(c, "stop");
    long session = json_count(js, 0);
    if (session <= 0) session += h->session;   /* 0: this session; -1: the one before */
    long start = json_count(ja, 0);
    long stop = json_count(jb, -1);
    for (int i = 0; i < h->n; i++) {
      const HEntry *e = &h->e[i];
      if (e->session == session && e->line >= start && (stop < 0 || e->line < stop))
        json_array_append_new(out, hist_item(e, output));
    }
  } else if (!strcmp(type, "search")) {
    const char *pat = json_string_value(json_object_get(c, "pattern"));
    if (!pat) pat = "*";
    int unique = json_is_true(json_object_get(c, "unique"));
    /* newest first while collecting, so `n` keeps the latest matches */
    json_t *rev = json_array();
    for (int i = h->n - 1; i >= 0 && (n < 0 || (long)json_array_size(rev) < n); i--) {
      const HEntry *e = &h->e[i];
      if (fnmatch(pat, e->input, 0) != 0) continue;
      if (unique) {
        int dup = 0;
        for (int j = i + 1; j < h->n && !dup; j++)
          if (!strcmp(h->e[j].input, e->input) && fnmatch(pat, h->e[j].input, 0) == 0) dup = 1;
        if (dup) continue;
      }
      json_array_append_new(rev, hist_item(e, output));
    }
    for (size_t i = json_array_size(rev); i-- > 0;) json_array_append(out, json_array_get(rev, i));
    json_decref(rev);
  }
  return json_pack("{s:s, s:o}", "status", "ok", "history", out);
}


void khist_free(KHistory *h) {
  arena_free(h->text);
  free(h->e);
  free(h->path);
  memset(h, 0, sizeof *h);
}
