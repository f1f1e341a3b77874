/*
** test_api.c — the extension API (lang/nbapi.h) as a library outside lang/
** uses it: with nb_VM opaque (this file includes no lvm.h).  Covers the
** accessors that replaced dist/'s reads of the VM's fields, protected calls,
** per-VM library data and the start-up-only rule of builtin registration.
*/
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "lang/nbapi.h"
#include "test_util.h"

static void null_write(nb_Sink *s, int stream, const char *d, size_t n) { (void)s; (void)stream; (void)d; (void)n; }
static nb_Sink quiet = { null_write, NULL, NULL, NULL, NULL };

static int b_twice(nb_VM *vm, nb_Value *args, int n, nb_Value *out) {
  (void)n; const char *fname = "api_twice";
  NB_ARGNUM(0, "x");
  *out = nb_numk(args[0].u.n * 2, args[0].kind);
  return NB_OK;
}
static nb_Builtin early[] = { { "api_twice", b_twice, "x", "api_twice(x): 2x" }, { NULL, NULL, NULL, NULL } };
static nb_Builtin late[] = { { "api_late", b_twice, "x", "never registered" }, { NULL, NULL, NULL, NULL } };

static const char key_a, key_b;
static int run(nb_VM *vm, const char *src) { return nb_run(vm, src, strlen(src), "t", 0); }

int main(void) {
  nbC_register(early);   /* before the first VM: allowed */
  nb_VM *vm = nb_vm_new(&quiet);

  TEST("api/registered-builtin") {
    CHECK(nbC_lookup("api_twice", 9) >= 0, "api_twice not in the index");
    CHECK_INT(run(vm, "y = api_twice(21)"), 0);
    int slot = nb_global_find(vm, "y", 1);
    CHECK(slot >= 0, "no global y");
    if (slot >= 0) { nb_Value *v = nb_global_at(vm, slot); CHECK(v->t == NB_TNUM && v->u.n == 42, "y != 42"); }
    CHECK_INT(run(vm, "api_twice(\"a\")"), 1);
    const nb_ErrorInfo *e = nb_last_error(vm);
    CHECK_STR(e ? e->message : NULL, "api_twice: expected a number for 'x', got string");
  }

  TEST("api/globals") {
    nb_Str *name = nbS_intern("from_c", 6);
    int slot = nb_global_slot(vm, name);
    nb_decref(nb_strv(name));
    nb_store(nb_global_at(vm, slot), nb_int(7));
    CHECK_INT(nb_global_find(vm, "from_c", 6), slot);
    CHECK_INT(run(vm, "assert(from_c == 7)"), 0);
  }

  TEST("api/interrupt") {
    CHECK(!nb_vm_interrupted(vm), "interrupted at start");
    nb_vm_interrupt(vm);
    CHECK(nb_vm_interrupted(vm) && *nb_vm_interrupt_flag(vm), "flag not set");
    nb_vm_clear_interrupt(vm);
    CHECK(!nb_vm_interrupted(vm), "flag not cleared");
    nb_vm_interrupt(vm);
    CHECK_INT(nbV_interrupt_error(vm), NB_ERR);
    CHECK(!nb_vm_interrupted(vm), "interrupt not consumed");
    nb_Value e = nb_error_value(vm);
    CHECK(e.t == NB_TREC, "no pending error record");
    nb_error_clear(vm);
    CHECK(nb_error_value(vm).t == NB_TNIL, "error not cleared");
  }

  TEST("api/pcall") {
    CHECK_INT(run(vm, "bad = fn(x) { error(\"no\") }\ngood = fn(x) { return x + 1 }"), 0);
    nb_Value bad = *nb_global_at(vm, nb_global_find(vm, "bad", 3));
    nb_Value good = *nb_global_at(vm, nb_global_find(vm, "good", 4));
    nb_Value arg = nb_int(1), r = nb_nil();
    CHECK_INT(nb_pcall(vm, bad, &arg, 1, &r), NB_ERR);
    nb_Value e = nb_error_value(vm);
    nb_Value m = e.t == NB_TREC ? nbR_get_cstr(e.u.p, "message") : nb_nil();
    CHECK_STR(m.t == NB_TSTR ? nb_str(m)->data : NULL, "no");
    nb_error_clear(vm);
    /* the stack was put back: a later call and a later run work */
    CHECK_INT(nb_pcall(vm, good, &arg, 1, &r), NB_OK);
    CHECK(r.t == NB_TNUM && r.u.n == 2, "good(1) != 2");
    nb_decref(r);
    CHECK_INT(run(vm, "assert(good(2) == 3)"), 0);
  }

  TEST("api/libdata") {
    int *a = nb_vm_libdata(vm, &key_a, sizeof(int));
    CHECK(a && *a == 0, "block not zeroed");
    *a = 5;
    double *b = nb_vm_libdata(vm, &key_b, 64);
    CHECK(b && b[7] == 0, "second block not zeroed");
    CHECK(nb_vm_libdata(vm, &key_a, sizeof(int)) == a, "same key, another block");
    nb_VM *vm2 = nb_vm_new(&quiet);
    int *a2 = nb_vm_libdata(vm2, &key_a, sizeof(int));
    CHECK(a2 != a && *a2 == 0, "a second VM shares the block");
    nb_vm_free(vm2);
    CHECK_INT(*(int *)nb_vm_libdata(vm, &key_a, sizeof(int)), 5);
  }

  TEST("api/default-device") {
    /* set_default_device keeps its setting in the tensor library's per-VM block */
    CHECK_INT(run(vm, "set_default_device(\"cpu\")\nassert(zeros(1).device == \"cpu\")"), 0);
  }

  TEST("api/late-registration-aborts") {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      int devnull = open("/dev/null", 1);
      if (devnull >= 0) dup2(devnull, 2);   /* the message is the expected outcome */
      nbC_register(late);
      _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "registration after the first VM did not abort (status %d)", status);
    CHECK(nbC_lookup("api_late", 8) < 0, "api_late registered");
  }

  nb_vm_free(vm);
  return t_failed ? 1 : 0;
}
