/*
** interp.c — the kernel's interpreter (like xeus's interpreter half): the
** language side of execute, complete, inspect and is_complete, and the output
** sink that turns what the VM shows into the messages the kernel core
** publishes.  No sockets here: every message leaves through the interp_Out
** callbacks (interp.h), every reply is returned to the core.
**
** Output: the VM's stdout/stderr text goes to out.stream, which batches it
** (core.c); displays, clear_output and the errors flush that batch first, so
** the front end sees everything in the order the cell produced it.  The
** value of a cell's last expression arrives through the sink's result()
** (NB_ECHO_LAST) and becomes the execute_result; display() calls become
** display_data.
*/
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernel/interp.h"
#include "kernel/ktext.h"
#include "lang/nabla.h"
#include "dist/dist.h"
#include "util/base64.h"

/* %%all cells: the worker lines the session forwards ("[rank N] " is written
** on its own, then the line) stream live as usual and are also kept per rank;
** at the end of the cell one display_data shows them grouped by rank.  A
** partial line continued after another rank's output counts for that rank,
** and so does a "[rank N]+ " piece of a line longer than the relay's bound. */
#define BYRANK_MAX 1024
#define BYRANK_CAP (1u << 20)
typedef struct ByRank { int on, cur[2]; KBuf b[BYRANK_MAX]; } ByRank;

struct Interp {
  nb_Sink sink;            /* the VM's; sink.ud is this Interp */
  nb_VM *vm;
  interp_Out out;
  /* set while a cell runs, read by interp_interrupt (a signal handler) */
  volatile sig_atomic_t running;
  int in_execute;          /* serving an execute_request: input() may ask the front end */
  int allow_stdin, silent;
  int exec_count;
  json_t *result;          /* the cell's value (a mime bundle), published as execute_result */
  int capture;             /* evaluating user_expressions: displays go to captured */
  json_t *captured;
  ByRank byrank;
};

/* ------------------------------------------------------------ %%all by rank */
static void byrank_feed(ByRank *br, int stream, const char *data, size_t len) {
  int si = stream == NB_STDERR, r = -1, n = 0;
  if (len >= 9 && len < 32 && data[len - 1] == ' ' && data[0] == '[') {
    char tmp[32]; memcpy(tmp, data, len); tmp[len] = 0;
    if (sscanf(tmp, "[rank %d]%n", &r, &n) == 1 && r >= 0 && r < BYRANK_MAX) {
      if ((size_t)n + 1 == len) { br->cur[si] = r; return; }
      /* "[rank N]+ ": the relay's next piece of that rank's line (dist/drelay.c):
      ** joined back, without the newline that ended the piece before */
      if ((size_t)n + 2 == len && tmp[n] == '+') {
        KBuf *b = &br->b[r];
        if (b->n && b->p[b->n - 1] == '\n' && b->n < BYRANK_CAP) b->n--;
        br->cur[si] = r;
        return;
      }
    }
  }
  if (br->cur[si] < 0) return;
  KBuf *b = &br->b[br->cur[si]];
  if (b->n < BYRANK_CAP) kbuf_add(b, data, len);
  if (len && data[len - 1] == '\n') br->cur[si] = -1;   /* unprefixed output after it is the session's */
}

static void byrank_publish(Interp *ip) {
  ByRank *br = &ip->byrank;
  KBuf t = {0};
  for (int r = 0; r < BYRANK_MAX; r++) {
    KBuf *b = &br->b[r];
    if (!b->n) continue;
    char h[48]; int hn = snprintf(h, sizeof h, "%s[rank %d]\n", t.n ? "\n" : "", r);
    kbuf_add(&t, h, (size_t)hn);
    kbuf_add(&t, b->p, b->n);
    if (b->p[b->n - 1] != '\n') kbuf_add(&t, "\n", 1);
    if (b->n >= BYRANK_CAP) kbuf_add(&t, "[...]\n", 6);
  }
  if (t.n)
    ip->out.publish(ip->out.ud, "display_data", json_pack("{s:{s:o}, s:{}, s:{}}", "data", "text/plain", k_jstr(t.p, t.n), "metadata", "transient"));
  free(t.p);
  for (int r = 0; r < BYRANK_MAX; r++) { free(br->b[r].p); br->b[r] = (KBuf){0}; }
  br->on = 0;
}

/* ------------------------------------------------------------ the sink */
static void sink_write(nb_Sink *s, int stream, const char *data, size_t len) {
  Interp *ip = s->ud;
  if (ip->capture) return;
  if (ip->byrank.on) byrank_feed(&ip->byrank, stream, data, len);
  ip->out.stream(ip->out.ud, stream, data, len);
}

static json_t *base64(const void *p, size_t n) {
  size_t len;
  char *o = nu_base64_dup(p, n, &len);
  if (!o) abort();
  json_t *r = json_stringn(o, len);
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
  Interp *ip = s->ud;
  if (ip->capture) return;
  ip->out.flush(ip->out.ud);
  json_t *d = bundle(items, n);
  if (display_id)
    ip->out.publish(ip->out.ud, update ? "update_display_data" : "display_data",
                    json_pack("{s:o, s:{}, s:{s:s}}", "data", d, "metadata", "transient", "display_id", display_id));
  else
    ip->out.publish(ip->out.ud, "display_data", json_pack("{s:o, s:{}, s:{}}", "data", d, "metadata", "transient"));
}

/* the cell's value: kept for the execute_result (or captured for user_expressions) */
static void sink_result(nb_Sink *s, const nb_MimeItem *items, int n) {
  Interp *ip = s->ud;
  if (ip->capture) { json_decref(ip->captured); ip->captured = bundle(items, n); return; }
  if (!ip->in_execute || ip->silent) return;
  json_decref(ip->result);
  ip->result = bundle(items, n);
}

static void sink_clear(nb_Sink *s, int wait) {
  Interp *ip = s->ud;
  if (ip->capture) return;
  ip->out.flush(ip->out.ud);
  ip->out.publish(ip->out.ud, "clear_output", json_pack("{s:b}", "wait", wait));
}

/* input(): only a cell whose request allowed stdin may ask the front end */
static char *sink_input(nb_Sink *s, const char *prompt, int password) {
  Interp *ip = s->ud;
  if (ip->capture || !ip->allow_stdin || !ip->in_execute) return NULL;
  ip->out.flush(ip->out.ud);
  return ip->out.input(ip->out.ud, prompt, password);
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
/* execute_request.  Its fields are checked before anything runs (a mistyped
** request gets a BadRequest reply, not a guess): silent (no output, no
** count, no history), store_history (the cell gets a number and is kept),
** allow_stdin (input() may ask the front end), stop_on_error, and
** user_expressions (evaluated after the cell, their values returned in the
** reply).  Output order on iopub: execute_input, the cell's streams and
** displays as they happen, the %%all by-rank summary, then execute_result or
** error; the reply itself is sent by the core. */
json_t *interp_execute(Interp *ip, json_t *c, int *abort_queue) {
  json_t *jcode = json_object_get(c, "code");
  json_t *uexp = json_object_get(c, "user_expressions");
  int silent = get_bool(c, "silent", 0);
  int store = get_bool(c, "store_history", silent != 1);
  int allow_stdin = get_bool(c, "allow_stdin", 0);
  int stop_on_error = get_bool(c, "stop_on_error", 1);
  if (!json_is_string(jcode) || silent < 0 || store < 0 || allow_stdin < 0 || stop_on_error < 0 ||
      (uexp && !json_is_null(uexp) && !json_is_object(uexp))) {
    k_log("execute_request with missing or mistyped fields");
    json_t *r = bad_request("execute_request: 'code' must be a string; silent, store_history, allow_stdin, stop_on_error booleans; user_expressions an object");
    json_object_set_new(r, "execution_count", json_integer(ip->exec_count));
    return r;
  }
  if (silent) store = 0;
  const char *code = json_string_value(jcode);
  size_t len = json_string_length(jcode);
  json_t *r = nul_in_code(jcode, "execute_request");
  if (r) {
    json_object_set_new(r, "execution_count", json_integer(ip->exec_count));
    return r;
  }
  if (store) ip->exec_count++;
  int count = ip->exec_count;
  if (!silent) ip->out.publish(ip->out.ud, "execute_input", json_pack("{s:O, s:i}", "code", jcode, "execution_count", count));

  ip->in_execute = 1; ip->allow_stdin = allow_stdin; ip->silent = silent;
  json_t *payload = json_array();
  int st = 0, usage = 0;
  const nb_ErrorInfo *err = NULL;
  char name[32]; snprintf(name, sizeof name, "<cell %d>", count);
  /* a %%all cell's output is shown grouped by rank at its end (the same
  ** parser as the magic that runs it) */
  if (nbD_all_cell(code, len, NULL, NULL)) { ip->byrank.on = !silent; ip->byrank.cur[0] = ip->byrank.cur[1] = -1; }
  ip->running = 1;
  /* the magics (dist/dmagic.c, the same as the REPL's); help goes to the pager */
  int mst = 0;
  if (nbD_magic(ip->vm, code, len, silent ? 0 : NB_ECHO_LAST, &mst, help_page, payload)) { st = mst == 1; usage = mst == 2; }
  else st = nb_run(ip->vm, code, len, name, silent ? 0 : NB_ECHO_LAST);
  ip->running = 0;
  /* A kernel lives for thousands of cells, and between a cell's tensors the
  ** message and interpreter objects of the next ones take small pieces of
  ** the freed heap, so the next tensor of the same size no longer fits the
  ** hole: a cell making one 200x200 tensor grew the kernel by 160 KB, every
  ** cell (issue 33).  Handing the free pages back after each cell keeps the
  ** RSS flat; a loop inside one cell keeps its memory as before (tensor.c's
  ** trim threshold), and the next cell pays only the page faults of what it
  ** makes anew. */
  malloc_trim(0);
  err = st ? nb_last_error(ip->vm) : NULL;
  ip->out.flush(ip->out.ud);
  if (ip->byrank.on) byrank_publish(ip);
  char *result_text = NULL;
  if (ip->result) {
    json_t *d = ip->result; ip->result = NULL;
    if (!st) {
      const char *t = json_string_value(json_object_get(d, "text/plain"));
      if (t) result_text = strdup(t);
      ip->out.publish(ip->out.ud, "execute_result", json_pack("{s:i, s:o, s:{}}", "execution_count", count, "data", d, "metadata"));
    } else json_decref(d);
  }
  json_t *reply;
  if (usage) {   /* a magic used wrongly: its message went to stderr */
    reply = json_pack("{s:s, s:s, s:s, s:[s]}", "status", "error", "ename", "UsageError", "evalue",
                      "a magic was used wrongly (see the message above; %help lists them)", "traceback", "UsageError: see the message above");
    json_t *pub = json_deep_copy(reply);
    json_object_del(pub, "status");
    ip->out.publish(ip->out.ud, "error", pub);
    json_object_set_new(reply, "execution_count", json_integer(count));
  } else if (st) {
    reply = error_content(err);
    json_t *pub = json_deep_copy(reply);
    json_object_del(pub, "status");
    ip->out.publish(ip->out.ud, "error", pub);
    json_object_set_new(reply, "execution_count", json_integer(count));
  } else {
    reply = json_pack("{s:s, s:i}", "status", "ok", "execution_count", count);
  }
  if (store) ip->out.record(ip->out.ud, count, code, len, result_text);
  free(result_text);
  json_object_set_new(reply, "payload", payload);
  /* user_expressions: each evaluated on its own, its value as a text/plain bundle */
  json_t *ures = json_object();
  if (json_is_object(uexp)) {
    const char *key; json_t *v;
    ip->capture = 1;
    json_object_foreach(uexp, key, v) {
      if (!json_is_string(v)) { json_object_set_new(ures, key, bad_request("user expression must be a string")); continue; }
      json_t *nul = nul_in_code(v, "user_expressions");
      if (nul) { json_object_set_new(ures, key, nul); continue; }
      json_decref(ip->captured); ip->captured = NULL;
      ip->running = 1;
      int est = nb_run(ip->vm, json_string_value(v), json_string_length(v), "<user_expression>", NB_ECHO_LAST);
      ip->running = 0;
      if (est) json_object_set_new(ures, key, error_content(nb_last_error(ip->vm)));
      else {
        json_t *d = ip->captured ? ip->captured : json_pack("{s:s}", "text/plain", "nil");
        ip->captured = NULL;
        json_object_set_new(ures, key, json_pack("{s:s, s:o, s:{}}", "status", "ok", "data", d, "metadata"));
      }
    }
    ip->capture = 0;
    json_decref(ip->captured); ip->captured = NULL;
  }
  json_object_set_new(reply, "user_expressions", ures);
  ip->in_execute = 0; ip->allow_stdin = 0;
  /* a failed cell (not a misused magic) drops the executes queued behind it,
  ** as ipykernel does: they were written expecting this one to succeed */
  *abort_queue = st && stop_on_error;
  return reply;
}

/* ------------------------------------------------------------ complete, inspect, is_complete */
static int get_cursor(json_t *c, const char *code, size_t len, size_t *byte) {
  json_t *cp = json_object_get(c, "cursor_pos");
  if (!cp || json_is_null(cp)) { *byte = len; return 0; }
  if (!json_is_number(cp)) return -1;
  double v = json_number_value(cp);
  *byte = v <= 0 ? 0 : k_cp_to_byte(code, len, (long)(v > 1e9 ? 1e9 : v));
  return 0;
}

json_t *interp_complete(Interp *ip, json_t *c) {
  json_t *jcode = json_object_get(c, "code");
  json_t *nul = nul_in_code(jcode, "complete_request");
  if (nul) return nul;
  size_t cur;
  if (!json_is_string(jcode) || get_cursor(c, json_string_value(jcode), json_string_length(jcode), &cur)) {
    return bad_request("complete_request: 'code' must be a string and 'cursor_pos' a number");
  }
  const char *code = json_string_value(jcode);
  size_t len = strlen(code);   /* the language sees the text up to an embedded NUL */
  if (cur > len) cur = len;
  nb_Completions cs = {0};
  nb_complete(ip->vm, code, (int)cur, &cs);
  json_t *matches = json_array();
  for (int i = 0; i < cs.n; i++) json_array_append_new(matches, k_jstr(cs.items[i], strlen(cs.items[i])));
  size_t s = cs.start < 0 ? cur : (size_t)cs.start, e = cs.end < 0 ? cur : (size_t)cs.end;
  if (s > len) s = len;
  if (e > len) e = len;
  if (e < s) e = s;
  nb_completions_free(&cs);
  return json_pack("{s:s, s:o, s:I, s:I, s:{}}", "status", "ok", "matches", matches,
                       "cursor_start", (json_int_t)k_byte_to_cp(code, len, s), "cursor_end", (json_int_t)k_byte_to_cp(code, len, e), "metadata");
}

json_t *interp_inspect(Interp *ip, json_t *c) {
  json_t *jcode = json_object_get(c, "code");
  json_t *nul = nul_in_code(jcode, "inspect_request");
  if (nul) return nul;
  size_t cur;
  if (!json_is_string(jcode) || get_cursor(c, json_string_value(jcode), json_string_length(jcode), &cur)) {
    return bad_request("inspect_request: 'code' must be a string and 'cursor_pos' a number");
  }
  const char *code = json_string_value(jcode);
  size_t len = strlen(code);
  if (cur > len) cur = len;
  char *doc = nb_inspect(ip->vm, code, (int)cur);
  json_t *data = json_object();
  if (doc) json_object_set_new(data, "text/plain", k_jstr(doc, strlen(doc)));
  free(doc);
  return json_pack("{s:s, s:b, s:o, s:{}}", "status", "ok", "found", json_object_size(data) > 0, "data", data, "metadata");
}

json_t *interp_is_complete(Interp *ip, json_t *c) {
  (void)ip;   /* completeness is syntax only: no VM needed */
  json_t *jcode = json_object_get(c, "code");
  json_t *nul = nul_in_code(jcode, "is_complete_request");
  if (nul) return nul;
  if (!json_is_string(jcode)) {
    return json_pack("{s:s}", "status", "unknown");
  }
  const char *indent = NULL;
  nb_Completeness cs = nb_is_complete(json_string_value(jcode), &indent);
  if (cs == NB_INCOMPLETE) return json_pack("{s:s, s:s}", "status", "incomplete", "indent", indent ? indent : "");
  return json_pack("{s:s}", "status", cs == NB_COMPLETE ? "complete" : "invalid");
}

/* ------------------------------------------------------------ lifetime */
Interp *interp_new(const interp_Out *out) {
  Interp *ip = calloc(1, sizeof *ip);
  if (!ip) abort();
  ip->out = *out;
  ip->sink.write = sink_write;
  ip->sink.display = sink_display;
  ip->sink.rich = 1;
  ip->sink.clear = sink_clear;
  ip->sink.input = sink_input;
  ip->sink.result = sink_result;
  ip->sink.ud = ip;
  ip->vm = nb_vm_new(&ip->sink);
  static char *argv0[] = { "<kernel>" };
  nb_vm_set_argv(ip->vm, 1, argv0);
  nb_vm_add_path(ip->vm, ".");
  return ip;
}

void interp_interrupt(Interp *ip) {
  if (ip && ip->running) nb_vm_interrupt(ip->vm);
}

void interp_free(Interp *ip) {
  if (!ip) return;
  nb_vm_free(ip->vm);
  json_decref(ip->result);
  json_decref(ip->captured);
  for (int r = 0; r < BYRANK_MAX; r++) free(ip->byrank.b[r].p);
  free(ip);
}
