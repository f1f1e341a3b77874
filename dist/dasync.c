/*
** dasync.c — the session's futures: dist.submit(rank, fn, args) sends a
** `task` to one worker without waiting (dsess_post), and the reply, whenever
** the session reads its socket (any wait, the monitor thread, a future's
** done()/result()), is kept here for the future until result() takes it.
** stdlib/dist.nbl wraps the builtins into futures and dist.as_completed.
**
** The table is bounded (DSESS_MAX_TASKS unfinished or untaken tasks: a
** clear error at submit, never a queue that grows) and guarded by its own
** mutex: dsession.c fills it with the session lock held (the monitor
** thread may pump a reply), the VM thread reads it without that lock, and
** this file never takes the session lock while holding its own.
**
** A task whose worker died fails loudly at result() (the worker's death,
** from the session's monitor); one whose session was stopped or restarted
** too — also after an elastic session healed (the dead worker's tasks are
** never resubmitted: a task may have had effects; the error names the rank
** and says to submit it again).  Such a task stays T_LOST, with why, until
** result() takes it (or, the table full, a new task needs its slot): freed
** earlier, its future would only say "already taken".  An error in the task's function comes back with its kind, message
** and the worker's traceback.
*/
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dist/dsession.h"
#include "dist/dinternal.h"
#include "dist/dmsg.h"
#include "util/clock.h"

enum { T_FREE, T_PENDING, T_DONE, T_LOST };
typedef struct Task {
  int state, rank, pid;
  uint32_t seq;
  int ok;                 /* T_DONE: the reply's status */
  char *body; size_t len; /* T_DONE: the reply after its status byte (malloc'd) */
  char why[96];           /* T_LOST: why it will never finish */
} Task;
static Task tasks[DSESS_MAX_TASKS];
static pthread_mutex_t T_mu = PTHREAD_MUTEX_INITIALIZER;

int dsess_async_posted(int rank, uint32_t seq, int pid) {
  pthread_mutex_lock(&T_mu);
  int slot = -1;
  char why[64];
  for (int i = 0; i < DSESS_MAX_TASKS; i++) {
    Task *t = &tasks[i];
    /* a pending task of a session that was stopped or restarted: it will never finish */
    if (t->state == T_PENDING && dsess_rank_state(t->rank, t->pid, why, sizeof why) == 2) {
      t->state = T_LOST;
      snprintf(t->why, sizeof t->why, "%s", why);
    }
    if (slot < 0 && t->state == T_FREE) slot = i;
  }
  /* full: the answers of earlier sessions' tasks nobody took make room (their futures then say "already taken") */
  for (int i = 0; i < DSESS_MAX_TASKS && slot < 0; i++) {
    Task *t = &tasks[i];
    if (t->state == T_LOST || (t->state == T_DONE && dsess_rank_state(t->rank, t->pid, why, sizeof why) == 2)) {
      free(t->body);
      *t = (Task){ 0 };
      slot = i;
    }
  }
  if (slot >= 0) tasks[slot] = (Task){ T_PENDING, rank, pid, seq, 0, NULL, 0, "" };
  pthread_mutex_unlock(&T_mu);
  return slot < 0 ? -1 : 0;
}

int dsess_async_reply(int rank, uint32_t seq, const char *body, size_t len) {
  pthread_mutex_lock(&T_mu);
  int kept = 0;
  for (int i = 0; i < DSESS_MAX_TASKS && !kept; i++) {
    Task *t = &tasks[i];
    if (t->state != T_PENDING || t->rank != rank || t->seq != seq) continue;
    kept = 1;
    if (!body) { t->state = T_FREE; break; }   /* never sent: dsess_post raised */
    t->ok = len >= 1 && body[0] == '0';
    t->len = len ? len - 1 : 0;
    t->body = malloc(t->len + 1);
    if (t->body) { memcpy(t->body, body + (len ? 1 : 0), t->len); t->body[t->len] = 0; }
    else { t->ok = 0; t->len = 0; }
    t->state = T_DONE;
  }
  pthread_mutex_unlock(&T_mu);
  return kept;
}

/* the slot of a future [id, seq], or -1 with the error raised */
static int slot_of(nb_VM *vm, const char *f, nb_Value id, nb_Value seq) {
  if (id.t != NB_TNUM || seq.t != NB_TNUM) return nb_error_kind(vm, "TypeError", "%s: expected a future (from dist.submit)", f), -1;
  double d = id.u.n, q = seq.u.n;
  int i = d >= 0 && d < DSESS_MAX_TASKS ? (int)d : -1;
  int ok = 0;
  if (i >= 0 && q >= 0 && q <= 4294967295.0) {
    pthread_mutex_lock(&T_mu);
    ok = tasks[i].state != T_FREE && tasks[i].seq == (uint32_t)q;
    pthread_mutex_unlock(&T_mu);
  }
  if (!ok) return nb_error_kind(vm, "DistError", "%s: this future's result was already taken (or it is not a future of this session)", f), -1;
  return i;
}

/* 1 when the task has an answer: a reply, or its worker is gone (why) */
static int finished(int i, char *why, size_t n) {
  pthread_mutex_lock(&T_mu);
  int st = tasks[i].state;
  int rank = tasks[i].rank, pid = tasks[i].pid;
  pthread_mutex_unlock(&T_mu);
  if (st == T_DONE) return 1;
  if (st == T_LOST) {
    pthread_mutex_lock(&T_mu);
    snprintf(why, n, "%s", tasks[i].why);
    pthread_mutex_unlock(&T_mu);
    return 1;
  }
  return dsess_rank_state(rank, pid, why, n) != 0;
}

static int b_submit(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  (void)nargs;
  const char *f = "dist.submit";
  if (a[0].t != NB_TNUM || !(a[0].u.n >= -1e9 && a[0].u.n <= 1e9) || a[0].u.n != (double)(int)a[0].u.n) return nb_error_kind(vm, "TypeError", "%s: rank must be an integer, got %s", f, nb_typename(a[0]));
  if (a[2].t != NB_TLIST && a[2].t != NB_TNIL) return nb_error_kind(vm, "TypeError", "%s: args must be a list, got %s (an all-number [...] is a tensor: write list(...))", f, nb_typename(a[2]));
  int nargs_fn = a[2].t == NB_TLIST ? nb_list(a[2])->n : 0;
  nb_List *l = nbL_new(nargs_fn + 1);
  nb_incref(a[1]); nbL_push(l, a[1]);
  for (int i = 0; i < nargs_fn; i++) { nb_incref(nb_list(a[2])->items[i]); nbL_push(l, nb_list(a[2])->items[i]); }
  nb_Value lv = nb_obj(NB_TLIST, l);
  nb_Buf b = {0};
  int st = nbZ_serialize(vm, lv, &b);
  nb_decref(lv);
  if (st) { nbB_free(&b); return NB_ERR; }
  uint32_t seq = 0; int pid = 0;
  st = dsess_post(vm, f, (int)a[0].u.n, "task", b.p, b.n, &seq, &pid);
  nbB_free(&b);
  if (st) return NB_ERR;
  int slot = -1;
  pthread_mutex_lock(&T_mu);
  for (int i = 0; i < DSESS_MAX_TASKS; i++) if (tasks[i].state != T_FREE && tasks[i].seq == seq && tasks[i].rank == (int)a[0].u.n) slot = i;
  pthread_mutex_unlock(&T_mu);
  nb_List *r = nbL_new(2);
  nbL_push(r, nb_int(slot)); nbL_push(r, nb_int((int64_t)seq));
  *out = nb_obj(NB_TLIST, r);
  return NB_OK;
}

/* dist_future_done(id, seq): whether result() would return at once */
static int b_done(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  (void)nargs;
  int i = slot_of(vm, "future.done", a[0], a[1]);
  if (i < 0) return NB_ERR;
  dsess_pump(vm, 0);
  char why[400];
  *out = nb_bool(finished(i, why, sizeof why));
  return NB_OK;
}

/* dist_future_wait(ids, timeout): waits until one of the futures [[id, seq], ...]
** is finished; returns its index in the list, or -1 after timeout seconds (nil: none) */
static int b_wait_any(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  (void)nargs;
  const char *f = "dist.as_completed";
  if (a[0].t != NB_TLIST) return nb_error_kind(vm, "TypeError", "%s: expected a list of futures", f);
  nb_List *l = nb_list(a[0]);
  if (a[1].t != NB_TNIL && a[1].t != NB_TNUM) return nb_error_kind(vm, "TypeError", "%s: timeout must be a number of seconds or nil", f);
  double timeout = a[1].t == NB_TNUM ? a[1].u.n : -1, t0 = nu_mono_s();
  int *slots = malloc(sizeof(int) * (size_t)(l->n ? l->n : 1));
  if (!slots) return nb_error(vm, "out of memory");
  for (int k = 0; k < l->n; k++) {
    nb_Value v = l->items[k];
    if (v.t != NB_TLIST || nb_list(v)->n != 2) { free(slots); return nb_error_kind(vm, "TypeError", "%s: item %d is not a future", f, k); }
    if ((slots[k] = slot_of(vm, f, nb_list(v)->items[0], nb_list(v)->items[1])) < 0) { free(slots); return NB_ERR; }
  }
  int found = -1;
  for (int first = 1; l->n; first = 0) {
    dsess_pump(vm, first ? 0 : 20);
    char why[400];
    for (int k = 0; k < l->n && found < 0; k++) if (finished(slots[k], why, sizeof why)) found = k;
    if (found >= 0) break;
    if (nb_vm_interrupted(vm)) { free(slots); return nb_error_kind(vm, "Interrupted", "%s: interrupted (the tasks go on running)", f); }
    if (timeout >= 0 && nu_mono_s() - t0 >= timeout) break;
  }
  free(slots);
  *out = nb_int(found);
  return NB_OK;
}

/* dist_future_result(id, seq): the finished task's value (its error raised
** with the worker's traceback; a dead worker's task fails).  The slot is
** freed: the nabla wrapper keeps the value for later calls. */
static int b_result(nb_VM *vm, nb_Value *a, int nargs, nb_Value *out) {
  (void)nargs;
  const char *f = "future.result";
  int i = slot_of(vm, f, a[0], a[1]);
  if (i < 0) return NB_ERR;
  char why[400] = "";
  if (!finished(i, why, sizeof why)) return nb_error_kind(vm, "DistError", "%s: the task has not finished (wait for it first)", f);
  pthread_mutex_lock(&T_mu);
  Task t = tasks[i];
  tasks[i] = (Task){ 0 };
  pthread_mutex_unlock(&T_mu);
  if (t.state != T_DONE) {
    int restarted = strstr(why, "restarted") || strstr(why, "stopped");
    return nb_error_kind(vm, "DistError", "dist.submit: the task on rank %d did not finish: %s%s", t.rank, why,
                         restarted ? " (it is not resubmitted: submit it again)" : "");
  }
  int st;
  if (t.ok) {
    st = nbZ_deserialize(vm, t.body ? t.body : "", t.len, out);
  } else if (!t.body) {
    st = nb_error_kind(vm, "DistError", "dist.submit: the task on rank %d failed and its reply was lost (out of memory)", t.rank);
  } else {
    const char *name = t.body, *msg = name + strlen(name) + 1;
    if (msg > t.body + t.len) msg = "";
    const char *report = msg + strlen(msg) + 1;
    if (report > t.body + t.len) report = "";
    st = nb_error_kind(vm, *name ? name : "Error", "%s\n(raised by the task on worker rank %d; its traceback:)\n%s", msg, t.rank, report);
  }
  free(t.body);
  return st;
}

static nb_Builtin async_builtins[] = {
  { "dist_submit", b_submit, "rank, fn, args=nil", "dist_submit(rank, fn, args): sends fn(args...) to one worker without waiting; [id, seq] for the future (use dist.submit)" },
  { "dist_future_done", b_done, "id, seq", "dist_future_done(id, seq): whether the task has finished (use future.done())" },
  { "dist_future_wait", b_wait_any, "futures, timeout=nil", "dist_future_wait([[id, seq], ...], timeout): the index of a finished one, or -1 after timeout seconds" },
  { "dist_future_result", b_result, "id, seq", "dist_future_result(id, seq): the finished task's value, or its error raised (use future.result())" },
  { NULL, NULL, NULL, NULL },
};

void nbD_async_init(void) { nbC_register(async_builtins); dm_init(); }
