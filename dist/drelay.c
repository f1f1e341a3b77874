/*
** drelay.c — the session's output relay (see drelay.h): what the workers
** print reaches the session's output as whole lines, each prefixed with its
** rank ("[rank 3] ..."), never spliced with another rank's bytes.
**
** Workers send their output in messages that need not end at a line's end
** (a `write` without a newline, a print longer than a message), and several
** ranks print at once: writing each message out as it comes, prefix first,
** put one rank's text in the middle of another's line.  So each rank keeps,
** per stream, the line it has begun; a line is written (prefix, then the
** line with its newline: two writes of the sink, which the kernel's %%all
** grouping reads as such) only once it is whole.  The pending line is
** bounded (DSESS_LINE_MAX): a longer one goes out in pieces, each a line of
** its own, the ones after the first prefixed "[rank 3]+ " (it continues
** that rank's previous line), cut at a UTF-8 character's boundary.  A
** partial line also goes out (as such a piece) when its rank's command ends,
** when the rank dies and when the session stops, so nothing is held back.
** --log-dir files get every byte as it comes, unchanged.
**
** Everything here runs under the session's lock (dsession.c's S_mu): by the
** VM's thread while it waits for replies, by the monitor thread between
** commands (then with no VM: straight to this process's stdout/stderr).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "dist/drelay.h"
#include "util/fdio.h"

typedef struct Line {
  char *p; size_t n;          /* the line begun (no newline yet), at most DSESS_LINE_MAX bytes (p: DSESS_LINE_MAX + 1, or NULL) */
  int cont;                   /* its first bytes went out already: the next piece is a continuation */
} Line;

/* per rank (and one more: srun's own output): [source][stream], source 0 the
** worker's relayed output, 1 what its launcher (ssh) printed */
static struct {
  int n;
  Line (*l)[2][2];
  int run_mode;               /* 0: a session; 1: nabla run --only-rank0; 2: nabla run, every rank prefixed */
  const int *log_fd;          /* nabla run --log-dir: each rank's output, unprefixed (-1: none) */
} R;

static void out_write(nb_VM *vm, int stream, const char *data, size_t len) {
  if (!len) return;
  if (vm) { nbW_write(vm, stream, data, len); return; }
  /* between commands (the monitor thread): straight to this process's stdout/stderr */
  if (stream == NB_STDOUT) fflush(stdout);
  nu_write_all(stream == NB_STDERR ? 2 : 1, data, len);
}

int dsess_relay_open(int n) {
  dsess_relay_close(NULL);
  R.l = calloc((size_t)n + 1, sizeof *R.l);
  if (!R.l) return -1;
  R.n = n;
  return 0;
}

void dsess_relay_mode(int run_mode, const int *log_fds) { R.run_mode = run_mode; R.log_fd = log_fds; }

/* the prefix of a line of rank (-1: srun) */
static int prefix(int rank, int cont, char *buf, size_t cap) {
  if (R.run_mode == 1 && rank == 0) { buf[0] = 0; return 0; }   /* the program's own output */
  if (rank < 0) return snprintf(buf, cap, cont ? "[srun]+ " : "[srun] ");
  return snprintf(buf, cap, cont ? "[rank %d]+ " : "[rank %d] ", rank);
}

/* writes one output line: the prefix, then the text and its newline (added
** when the text is a piece without one) */
static void emit(nb_VM *vm, int rank, int stream, Line *L, const char *text, size_t len, int whole) {
  char pre[48]; int pn = prefix(rank, L->cont, pre, sizeof pre);
  if (pn > 0) out_write(vm, stream, pre, (size_t)pn);
  if (whole) out_write(vm, stream, text, len);
  else {
    /* one write with its newline: the kernel's %%all grouping ends a rank's line at a write that ends with one */
    char *t = malloc(len + 1);
    if (t) { memcpy(t, text, len); t[len] = '\n'; out_write(vm, stream, t, len + 1); free(t); }
    else { out_write(vm, stream, text, len); out_write(vm, stream, "\n", 1); }
  }
  L->cont = !whole;
}

/* how many of the n bytes at p end on a character's boundary: a UTF-8
** sequence the piece would cut stays for the next piece */
static size_t utf8_cut(const char *p, size_t n) {
  for (size_t back = 1; back <= 3 && back <= n; back++) {
    unsigned char c = (unsigned char)p[n - back];
    if ((c & 0xC0) == 0x80) continue;   /* a continuation byte: look further back */
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back && back < n ? n - back : n;
  }
  return n;
}

/* sends the line begun as a piece (its newline added) */
static void flush_line(nb_VM *vm, int rank, int stream, Line *L, int cut_utf8) {
  if (!L->n) return;
  size_t k = cut_utf8 ? utf8_cut(L->p, L->n) : L->n;
  emit(vm, rank, stream, L, L->p, k, 0);
  memmove(L->p, L->p + k, L->n - k);
  L->n -= k;
}

static int grow(Line *L) {
  if (L->p) return 0;
  return (L->p = malloc(DSESS_LINE_MAX + 1)) ? 0 : -1;   /* + its newline */
}

static void feed(nb_VM *vm, int rank, int stream, Line *L, const char *d, size_t n) {
  while (n) {
    const char *nl = memchr(d, '\n', n);
    size_t k = nl ? (size_t)(nl - d) + 1 : n;
    size_t body = nl ? k - 1 : k;   /* the bytes of the line, without its newline */
    if (L->n + body <= DSESS_LINE_MAX) {
      if (nl && !L->n) emit(vm, rank, stream, L, d, k, 1);   /* a whole line: as it is, no copy */
      else if (nl) {
        memcpy(L->p + L->n, d, k);   /* fits: L->n + body <= DSESS_LINE_MAX, and the buffer has room for the newline */
        emit(vm, rank, stream, L, L->p, L->n + k, 1);
        L->n = 0;
      } else {
        if (grow(L)) { emit(vm, rank, stream, L, d, k, 0); d += k; n -= k; continue; }   /* no memory: a piece now rather than nothing */
        memcpy(L->p + L->n, d, k);
        L->n += k;
      }
      d += k; n -= k;
      continue;
    }
    /* longer than the bound: fill the line up, send it as a piece, go on with the rest */
    if (grow(L)) { emit(vm, rank, stream, L, d, body, 0); d += body; n -= body; continue; }
    size_t room = DSESS_LINE_MAX - L->n;
    memcpy(L->p + L->n, d, room);
    L->n += room; d += room; n -= room;
    flush_line(vm, rank, stream, L, 1);
  }
}

/* the Line of rank's (-1: srun's) source and stream */
static Line *line_of(int rank, int src, int stream) {
  if (!R.l || rank >= R.n) return NULL;
  return &R.l[rank < 0 ? R.n : rank][src][stream == NB_STDERR];
}

static void relay(nb_VM *vm, int rank, int src, int stream, const char *data, size_t len) {
  if (stream != NB_STDERR) stream = NB_STDOUT;
  if (R.run_mode == 1 && rank == 0 && stream == NB_STDOUT) { out_write(vm, stream, data, len); return; }   /* nothing else goes there */
  if (R.run_mode == 1 && stream == NB_STDOUT && rank > 0) return;
  Line *L = line_of(rank, src, stream);
  if (!L) { out_write(vm, stream, data, len); return; }
  feed(vm, rank, stream, L, data, len);
  if (stream == NB_STDOUT && vm) fflush(stdout);
}

void dsess_relay_output(nb_VM *vm, int rank, int stream, const char *data, size_t len) {
  if (R.log_fd && rank >= 0 && R.log_fd[rank] >= 0) nu_write_all(R.log_fd[rank], data, len);
  relay(vm, rank, 0, stream, data, len);
}

void dsess_relay_launcher(nb_VM *vm, int rank, int stream, const char *data, size_t len) {
  relay(vm, rank, 1, stream, data, len);
}

void dsess_relay_flush(nb_VM *vm, int rank) {
  if (!R.l) return;
  for (int r = rank < 0 ? 0 : rank; r <= (rank < 0 ? R.n : rank) && r <= R.n; r++)
    for (int src = 0; src < 2; src++)
      for (int s = 0; s < 2; s++) {
        Line *L = &R.l[r][src][s];
        flush_line(vm, r == R.n ? -1 : r, s ? NB_STDERR : NB_STDOUT, L, 0);
        free(L->p); L->p = NULL;   /* memory only for lines in progress: between commands, none */
      }
}

void dsess_relay_report(nb_VM *vm, int rank, const char *text) {
  dsess_relay_flush(vm, rank);
  size_t n = strlen(text);
  dsess_relay_output(vm, rank, NB_STDERR, text, n);
  if (n && text[n - 1] != '\n') dsess_relay_output(vm, rank, NB_STDERR, "\n", 1);
}

void dsess_relay_close(nb_VM *vm) {
  if (R.l) {
    dsess_relay_flush(vm, -1);   /* which frees the lines' buffers */
    free(R.l);
  }
  R.l = NULL; R.n = 0;
}
