/*
** lsession.c — the embedding API (nabla.h): VMs, running source, modules and
** import, the stdio sink, display of values.
*/
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>
#include "lvm.h"
#include "tensor/tensor.h"
#include "util/fdio.h"

/* The VM stack and the frame array are reserved whole when the VM is made
** and cost only what a program touches (calloc of this size is fresh
** zeroed pages from mmap): nabla-to-nabla calls do not use the C stack, so
** recursion is bounded by these -- 200000 nested calls, 4M registers (64
** MB of address space, 16 bytes a slot) -- with a RecursionError, as Lua's
** LUAI_MAXSTACK bounds its stack at a million slots. */
#define STACK_SLOTS (1 << 22)
#define MAX_DEPTH 200000

const char *nb_version(void) {
#ifdef NABLA_VERSION
  return NABLA_VERSION;
#else
  return "0.0.0";
#endif
}

/* ------------------------------------------------------------ stdio sink */
/* stdio, unless fd 1 or 2 came non-blocking (shared with a program that set
** O_NONBLOCK): then stdio would drop bytes on EAGAIN, so such output goes
** straight to the descriptor through nu_write_all, which waits it out.  Looked
** at once per process: the descriptors' flags are the launcher's to set. */
static pthread_once_t stdio_once = PTHREAD_ONCE_INIT;
static int stdio_direct;
static void stdio_probe(void) { stdio_direct = nu_fd_nonblocking(1) || nu_fd_nonblocking(2); }
static void stdio_write(nb_Sink *s, int stream, const char *data, size_t len) {
  (void)s;
  FILE *f = stream == NB_STDERR ? stderr : stdout;
  pthread_once(&stdio_once, stdio_probe);
  if (stdio_direct) { fflush(f); nu_write_all(stream == NB_STDERR ? 2 : 1, data, len); return; }
  fwrite(data, 1, len, f);
  if (stream == NB_STDERR) fflush(stderr);
}
static void stdio_display(nb_Sink *s, const nb_MimeItem *items, int n, const char *id, int update) {
  (void)s; (void)n; (void)id; (void)update;
  fwrite(items[0].data, 1, items[0].len, stdout);
  fputc('\n', stdout);
}
static char *stdio_input(nb_Sink *s, const char *prompt, int password) {
  (void)s;
  fputs(prompt, stdout); fflush(stdout);
  struct termios old, quiet; int tty = password && isatty(0) && tcgetattr(0, &old) == 0;
  if (tty) { quiet = old; quiet.c_lflag &= ~(tcflag_t)ECHO; tcsetattr(0, TCSANOW, &quiet); }
  char *line = NULL; size_t cap = 0;
  ssize_t n = getline(&line, &cap, stdin);
  if (tty) { tcsetattr(0, TCSANOW, &old); fputc('\n', stdout); }
  if (n < 0) { free(line); return NULL; }
  if (n > 0 && line[n - 1] == '\n') line[n - 1] = 0;
  return line;
}
/* constant in practice: nothing writes to it after static initialization */
static nb_Sink stdio_sink = { stdio_write, stdio_display, NULL, stdio_input, NULL };
nb_Sink *nb_stdio_sink(void) { return &stdio_sink; }

void nbW_write(nb_VM *vm, int stream, const char *s, size_t n) {
  nb_Sink *k = vm->sink ? vm->sink : &stdio_sink;
  k->write(k, stream, s, n);
}

nb_Str *nbS_tostr(nb_Value v) {
  if (v.t == NB_TSTR) { nb_incref(v); return v.u.p; }
  nb_Buf b = {0};
  nb_tostring(&b, v, false);
  if (b.n > NB_MAX_STR) b.n = NB_MAX_STR;   /* for messages and labels: cut (str() reports it instead) */
  nb_Str *s = nbS_new(b.p ? b.p : "", b.n);
  nbB_free(&b);
  return s;
}

void nbW_show(nb_VM *vm, nb_Value v, bool as_result, const char *display_id, bool update) {
  nb_Sink *k = vm->sink ? vm->sink : &stdio_sink;
  nb_Buf text = {0}, html = {0};
  nb_tostring(&text, v, true);
  nb_MimeItem items[2] = { { "text/plain", nbB_cstr(&text), text.n } };
  int n = 1;
  if (v.t == NB_TTENSOR) {
    nbT_display(vm, v, &html);
    if (html.n) { items[1].mime = "text/html"; items[1].data = html.p; items[1].len = html.n; n = 2; }
  }
  if (as_result && k->result) k->result(k, items, n);
  else if (k->display) k->display(k, items, n, display_id, update);
  else { k->write(k, NB_STDOUT, text.p, text.n); k->write(k, NB_STDOUT, "\n", 1); }
  nbB_free(&text); nbB_free(&html);
}
void nbW_display(nb_VM *vm, nb_Value v) { nbW_show(vm, v, false, NULL, false); }

/* ------------------------------------------------------------ modules */
nb_Module *nbM_new(const char *name, const char *path) {
  nb_Module *m = calloc(1, sizeof *m);
  if (!m) abort();
  m->h.rc = 1; m->h.type = NB_TMODULE;
  m->name = nbS_cstr(name);
  m->path = path ? nbS_cstr(path) : NULL;
  return m;
}
const char *nbM_name(const nb_Module *m) { return m->name->data; }

static void module_clear(nb_Module *m) {
  for (int i = 0; i < m->n; i++) { nb_Value v = m->vals[i]; m->vals[i] = nb_undef(); nb_decref(v); }
}
void nbM_free(nb_Module *m) {
  module_clear(m);
  for (int i = 0; i < m->n; i++) nb_decref(nb_strv(m->names[i]));
  free(m->names); free(m->vals); free(m->index);
  nb_decref(nb_strv(m->name));
  if (m->path) nb_decref(nb_strv(m->path));
  free(m);
}

static void module_reindex(nb_Module *m) {
  free(m->index);
  m->icap = 16; while (m->icap < m->n * 2 + 2) m->icap *= 2;
  m->index = malloc(sizeof(int32_t) * (size_t)m->icap);
  if (!m->index) abort();
  for (int i = 0; i < m->icap; i++) m->index[i] = -1;
  for (int i = 0; i < m->n; i++) {
    uint32_t h = nbS_hashof(m->names[i]) & (uint32_t)(m->icap - 1);
    while (m->index[h] >= 0) h = (h + 1) & (uint32_t)(m->icap - 1);
    m->index[h] = i;
  }
}
int nbM_global_find(const nb_Module *m, const char *name, size_t len) {
  if (!m->index) return -1;
  uint32_t hh = nbS_hash(name, len), h = hh & (uint32_t)(m->icap - 1);
  while (m->index[h] >= 0) {
    nb_Str *s = m->names[m->index[h]];
    if (nbS_hashof(s) == hh && s->len == len && memcmp(s->data, name, len) == 0) return m->index[h];
    h = (h + 1) & (uint32_t)(m->icap - 1);
  }
  return -1;
}
int nbM_global_slot(nb_Module *m, nb_Str *name) {
  int i = nbM_global_find(m, name->data, name->len);
  if (i >= 0) return i;
  if (m->n == m->cap) {
    m->cap = m->cap ? m->cap * 2 : 64;
    m->names = realloc(m->names, sizeof(nb_Str *) * (size_t)m->cap);
    m->vals = realloc(m->vals, sizeof(nb_Value) * (size_t)m->cap);
    if (!m->names || !m->vals) abort();
  }
  m->names[m->n] = nbS_intern_str(name);
  m->vals[m->n] = nb_undef();
  m->n++;
  if (m->n * 2 + 2 > m->icap) module_reindex(m);
  else {
    uint32_t h = nbS_hashof(name) & (uint32_t)(m->icap - 1);
    while (m->index[h] >= 0) h = (h + 1) & (uint32_t)(m->icap - 1);
    m->index[h] = m->n - 1;
  }
  return m->n - 1;
}
static void set_global(nb_Module *m, const char *name, nb_Value v) {
  nb_Str *s = nbS_intern(name, strlen(name));
  int i = nbM_global_slot(m, s);
  nb_decref(nb_strv(s));
  nb_store(&m->vals[i], v);
}

/* ------------------------------------------------------------ files */
static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) { fclose(f); errno = EISDIR; return NULL; }
  char *buf = malloc((size_t)st.st_size + 1);
  if (!buf) { fclose(f); return NULL; }
  size_t n = fread(buf, 1, (size_t)st.st_size, f);
  fclose(f);
  buf[n] = 0; *len = n;
  return buf;
}

/* A process-wide setting: the front end's main sets it once at startup,
** before it makes a VM; each VM takes its own copy (nb_Global.stdlib_dir). */
static char *stdlib_setting;
void nb_set_stdlib_dir(const char *dir) { free(stdlib_setting); stdlib_setting = dir ? strdup(dir) : NULL; }

/* Search order: the stdlib dir, $NABLA_PATH (colon separated), the dirs added
** with nb_vm_add_path (a script's own directory), the current directory. */
static char *find_module(nb_VM *vm, const char *name) {
  char path[4096];
  const char *env = getenv("NABLA_PATH");
  const char *dirs[64]; int nd = 0;
  char *envcopy = env ? strdup(env) : NULL;
  if (vm->g->stdlib_dir) dirs[nd++] = vm->g->stdlib_dir;
  if (envcopy) for (char *save, *t = strtok_r(envcopy, ":", &save); t && nd < 48; t = strtok_r(NULL, ":", &save)) dirs[nd++] = t;
  for (int i = 0; i < vm->npaths && nd < 63; i++) dirs[nd++] = vm->paths[i];
  dirs[nd++] = ".";
  char *found = NULL;
  for (int i = 0; i < nd && !found; i++) {
    snprintf(path, sizeof path, "%s/%s.nbl", dirs[i], name);
    if (access(path, R_OK) == 0) found = strdup(path);
  }
  free(envcopy);
  return found;
}

/* parse -> resolve -> evaluate; 2: a syntax error (nothing ran), 1: a
** run-time error, 0: done.  The chunk outlives this call if a function made
** in it is still referenced (it holds the chunk through its proto). */
static int run_in_module(nb_VM *vm, nb_Module *m, const char *src, size_t len, const char *filename, int flags) {
  nb_Node *prog;
  /* source positions and string literals are 32-bit */
  if (len > NB_MAX_STR) { nbS_too_long(vm, filename, len); return 2; }
  nb_Chunk *c = nbP_parse(vm, src, len, filename, &prog);
  int st;
  if (!prog) st = 2;
  else if (nbK_resolve(vm, c, prog, m)) st = 2;
  else st = nbV_run_program(vm, c, prog, m, flags) ? 1 : 0;
  nbP_chunk_release(c);
  return st;
}

int nbM_import(nb_VM *vm, nb_Str *name, nb_Value *out) {
  for (int i = 0; i < vm->nmods; i++)
    if (strcmp(vm->mods[i]->name->data, name->data) == 0) { vm->mods[i]->h.rc++; *out = nb_obj(NB_TMODULE, vm->mods[i]); return NB_OK; }
  char *path = find_module(vm, name->data);
  if (!path) return nb_error_kind(vm, "ImportError", "no module named '%s' (looked for %s.nbl in the stdlib directory, $NABLA_PATH, the script's directory and the current directory)", name->data, name->data);
  size_t len;
  char *src = read_file(path, &len);
  if (!src) { nb_error_kind(vm, "ImportError", "cannot read module '%s' from %s: %s", name->data, path, strerror(errno)); free(path); return NB_ERR; }
  nb_Module *m = nbM_new(name->data, path);
  /* registered before running, so a cyclic import sees the partial module */
  if (vm->nmods == vm->capmods) {
    vm->capmods = vm->capmods ? vm->capmods * 2 : 8;
    vm->mods = realloc(vm->mods, sizeof(nb_Module *) * (size_t)vm->capmods);
    if (!vm->mods) abort();
  }
  vm->mods[vm->nmods++] = m;
  nb_Frame *saved = vm->frame;
  int st = run_in_module(vm, m, src, len, path, 0);
  vm->frame = saved;
  free(src); free(path);
  if (st) {
    /* drop the half-initialized module so a fixed file can be imported again */
    vm->nmods--;
    module_clear(m);
    nb_decref(nb_obj(NB_TMODULE, m));
    return NB_ERR;
  }
  m->h.rc++;
  *out = nb_obj(NB_TMODULE, m);
  return NB_OK;
}

/* ------------------------------------------------------------ VMs */
/* tensor/ has one interrupt flag per process (nt_set_interrupt_flag): long
** tensor kernels watch the flag of the VM that ran last.  `attached` mirrors
** that process-wide setting of tensor/ -- which VM's flag it points to -- so
** nb_vm_free can take it back; like the flag, it is written only by the
** thread running VMs (the thread rule, lvm.h). */
static nb_VM *attached;
static void attach_vm(nb_VM *vm) {
  attached = vm;
  nt_set_interrupt_flag(&vm->interrupted);
  nbO_gc_attach(&vm->poll);
}
static void detach_vm(nb_VM *vm) {
  if (attached != vm) return;
  attached = NULL;
  nt_set_interrupt_flag(NULL);
  nbO_gc_attach(NULL);
}

nb_VM *nb_vm_new(nb_Sink *sink) {
  nb_VM *vm = calloc(1, sizeof *vm);
  if (!vm) abort();
  vm->g = nb_state_new(vm);
  if (stdlib_setting) { vm->g->stdlib_dir = strdup(stdlib_setting); if (!vm->g->stdlib_dir) abort(); }
  /* The libraries register (the first time only) with no VM bound: their
  ** builtins' names and string defaults are interned in the process table,
  ** which outlives every VM and which every VM's table falls back to. */
  nb_state_bind(NULL);
  nbopen_libs();   /* lang's libraries; front ends opened theirs before */
  nbC_freeze();
  nb_state_bind(vm);
  vm->sink = sink;
  vm->main = nbM_new("__main__", NULL);
  /* zeroed (NB_TUNDEF, no reference): a call does not clear its callee's
  ** temporaries, so every slot must hold a value before first use (lexec.c;
  ** a block this large comes from mmap, already zero, so this costs nothing) */
  vm->stack = calloc(STACK_SLOTS, sizeof(nb_Value));
  if (!vm->stack) abort();
  vm->sp = vm->stack; vm->stack_end = vm->stack + STACK_SLOTS;
  vm->max_depth = MAX_DEPTH;
  vm->err = nb_nil(); vm->tensor_state = nb_nil();
  set_global(vm->main, "argv", nb_obj(NB_TLIST, nbL_new(0)));
  /* NABLA_STEP_LIMIT=N: stop a run after N poll points (loop iterations and
  ** calls) with an uncatchable StepLimit error -- for tests of interrupts
  ** in tight loops, on either engine */
  const char *lim = getenv("NABLA_STEP_LIMIT");
  if (lim && *lim) nb_vm_set_step_limit(vm, strtoull(lim, NULL, 10));
  return vm;
}

/* Drops everything the VM holds with its own state bound, collects the
** cycles among it, then frees the state; the thread's earlier binding comes
** back (none, if it was this VM). */
void nb_vm_free(nb_VM *vm) {
  if (!vm) return;
  nb_Global *prev = nb_state_bound_, *g = vm->g;
  nb_state_bind(vm);
  detach_vm(vm);
  module_clear(vm->main);
  for (int i = 0; i < vm->nmods; i++) module_clear(vm->mods[i]);
  for (int i = 0; i < vm->nmods; i++) nb_decref(nb_obj(NB_TMODULE, vm->mods[i]));
  nb_decref(nb_obj(NB_TMODULE, vm->main));
  nb_decref(vm->err); nb_decref(vm->tensor_state);
  nbO_collect();
  for (int i = 0; i < vm->npaths; i++) free(vm->paths[i]);
  free(vm->paths); free(vm->mods); free(vm->stack);
  free(vm->xframes); free(vm->xh);
  free(vm->last_name); free(vm->last_msg); free(vm->last_report);
  free(vm);
  nb_state_free(g);
  nb_state_bound_ = prev == g ? NULL : prev;
}

void nb_vm_set_sink(nb_VM *vm, nb_Sink *sink) { vm->sink = sink; }
nb_Sink *nb_vm_sink(nb_VM *vm) { return vm->sink ? vm->sink : &stdio_sink; }
void nb_vm_set_argv(nb_VM *vm, int argc, char **argv) {
  nb_state_bind(vm);
  nb_List *l = nbL_new(argc);
  for (int i = 0; i < argc; i++) nbL_push(l, nb_strv(nbS_cstr(argv[i])));
  set_global(vm->main, "argv", nb_obj(NB_TLIST, l));
}
void nb_vm_add_path(nb_VM *vm, const char *dir) {
  vm->paths = realloc(vm->paths, sizeof(char *) * (size_t)(vm->npaths + 1));
  if (!vm->paths) abort();
  vm->paths[vm->npaths++] = strdup(dir);
}
void nb_vm_set_step_limit(nb_VM *vm, uint64_t steps) { vm->step_limit = steps; vm->steps = 0; vm->poll = steps != 0 || vm->interrupted; }
void nb_vm_interrupt(nb_VM *vm) { vm->interrupted = 1; vm->poll = 1; }

/* The C stack of the calling thread bounds recursion through C (a builtin
** that calls back into nabla code): its top and size, measured once per
** thread (a thread's stack never moves).  Not with pthread_getattr_np on the
** main thread: glibc finds the main stack's end by parsing /proc/self/maps
** (~180K instructions with its syscalls, and every REPL line and cell paid
** it: bench/results/2026-11-26-startup.md).
** The kernel puts the stack's top just above the executable's file name
** (AT_EXECFN: the name, its NUL, then one null pointer end the mapping), and
** the stack may grow RLIMIT_STACK below that top, the bound glibc reports
** too.  Anything unexpected (no AT_EXECFN, an unlimited stack, this frame
** outside the computed range) falls back to pthread_getattr_np. */
static _Thread_local char *cstack_top;
static _Thread_local size_t cstack_size;

static bool main_stack(char *here, char **top, size_t *size) {
  if (gettid() != getpid()) return false;
  const char *fn = (const char *)getauxval(AT_EXECFN);
  struct rlimit rl;
  long page = sysconf(_SC_PAGESIZE);
  if (!fn || page <= 0 || getrlimit(RLIMIT_STACK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
      rl.rlim_cur > ((rlim_t)1 << 40))
    return false;
  uintptr_t end = (uintptr_t)fn + strlen(fn) + 1 + sizeof(void *);
  end = (end + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
  if ((uintptr_t)here >= end || end - (uintptr_t)here >= rl.rlim_cur) return false;
  *top = (char *)end;
  *size = (size_t)rl.rlim_cur;
  return true;
}

static void measure_cstack(nb_VM *vm) {
  char *here = __builtin_frame_address(0);
  char *top = cstack_top;
  size_t size = cstack_size;
  if (!top) {
    size = 8u << 20;
    if (main_stack(here, &top, &size)) {
      cstack_top = top; cstack_size = size;
    } else {
      pthread_attr_t a;
      void *addr = NULL;
      if (pthread_getattr_np(pthread_self(), &a) == 0) {
        if (pthread_attr_getstack(&a, &addr, &size) != 0) addr = NULL;
        pthread_attr_destroy(&a);
      }
      if (addr) { top = (char *)addr + size; cstack_top = top; cstack_size = size; }
      else top = here + 4096;   /* unknown: from this run's frame, measured again next run */
    }
  }
  vm->cstack_base = top;
  size_t margin = size / 8 > (256u << 10) ? size / 8 : (256u << 10);
  vm->cstack_limit = size > margin * 2 ? size - margin : size / 2;
}

/* One chunk in the main module: each REPL line and Jupyter cell is one, and
** its globals stay for the next (the incremental session, lresolve.c).  An
** outer run (vm->frame == NULL: called by a front end) owns the VM for its
** duration: it resets the VM stack and depth, measures this thread's C stack,
** attaches the VM to tensor/'s interrupt flag and, at the end, drops an
** interrupt that came too late and does a collection that came due.  A run
** nested in running code (a builtin that runs source) leaves all that to the
** outer one and only runs its chunk on top of the current stack. */
int nb_run(nb_VM *vm, const char *src, size_t len, const char *filename, int flags) {
  nb_state_bind(vm);
  nb_decref(vm->err); vm->err = nb_nil(); vm->err_located = false;
  free(vm->last_name); free(vm->last_msg); free(vm->last_report);
  vm->last_name = vm->last_msg = vm->last_report = NULL;
  bool outer = vm->frame == NULL;
  if (outer) { measure_cstack(vm); vm->sp = vm->stack; vm->depth = 0; attach_vm(vm); }
  vm->steps = 0;
  int st = run_in_module(vm, vm->main, src, len, filename ? filename : "<input>", flags);
  if (outer) {
    vm->frame = NULL;
    /* an interrupt that arrived after the code finished is not kept for later */
    vm->interrupted = 0; vm->poll = vm->step_limit != 0;
  }
  if (vm->grad_disabled && outer) { vm->grad_disabled = 0; nbT_set_grad_enabled(true); }
  if (st) nbE_finish(vm);
  /* cycles: a collection requested during the run and not yet done */
  if (outer && nbO_gc_due()) nbO_collect();
  return st;
}

int nb_run_file(nb_VM *vm, const char *path) {
  nb_state_bind(vm);   /* the error below is a value of this VM */
  size_t len;
  char *src = read_file(path, &len);
  if (!src) {
    nb_error_kind(vm, "IOError", "cannot read %s: %s", path, strerror(errno));
    nbE_finish(vm);
    return 1;
  }
  int st = nb_run(vm, src, len, path, 0);
  free(src);
  return st;
}

const nb_ErrorInfo *nb_last_error(nb_VM *vm) { return vm->last_report ? &vm->last : NULL; }

char *nb_globals_list(nb_VM *vm) {
  nb_Buf b = {0};
  for (int i = 0; i < vm->main->n; i++) {
    nb_Value v = vm->main->vals[i];
    if (v.t == NB_TUNDEF) continue;
    nbB_printf(&b, "%s\t%s\n", vm->main->names[i]->data, nb_typename(v));
  }
  return b.p ? b.p : strdup("");
}

void nb_reset(nb_VM *vm) {
  nb_state_bind(vm);
  int i = nbM_global_find(vm->main, "argv", 4);
  nb_Value keep = i >= 0 ? vm->main->vals[i] : nb_undef();
  nb_incref(keep);
  module_clear(vm->main);
  if (i >= 0) vm->main->vals[i] = keep;
}
