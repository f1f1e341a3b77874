/*
** test_interp.c — the kernel's interpreter (kernel/interp.c) driven without
** the server: fake interp_Out callbacks record what it publishes, so these
** tests check what a request's reply and iopub messages contain and in which
** order, and that the interpreter needs no sockets (the xeus-style split).
** The end-to-end protocol is tested by the Python suites next to this file.
*/
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "kernel/interp.h"
#include "lang/nabla.h"
#include "tests/unit/test_util.h"

/* what the interpreter sent, in order: "stream:stdout:TEXT", "execute_input", ... */
static char log_[8192];
static int records;

static void add(const char *s) {
  size_t n = strlen(log_);
  snprintf(log_ + n, sizeof log_ - n, "%s%s", n ? "|" : "", s);
}
static void o_stream(void *ud, int stream, const char *data, size_t len) {
  (void)ud;
  char b[512]; snprintf(b, sizeof b, "stream:%s:%.*s", stream == NB_STDERR ? "stderr" : "stdout", (int)len, data);
  add(b);
}
static void o_flush(void *ud) { (void)ud; }
static void o_publish(void *ud, const char *msg_type, json_t *content) {
  (void)ud;
  add(msg_type);
  json_decref(content);
}
static char *o_input(void *ud, const char *prompt, int password) { (void)ud; (void)prompt; (void)password; return strdup("typed"); }
static void o_record(void *ud, int count, const char *code, size_t len, const char *value) {
  (void)ud; (void)count; (void)code; (void)len; (void)value;
  records++;
}

static json_t *exec(Interp *ip, const char *code, int *abort_queue) {
  log_[0] = 0;
  json_t *c = json_pack("{s:s, s:b}", "code", code, "allow_stdin", 1);
  json_t *r = interp_execute(ip, c, abort_queue);
  json_decref(c);
  return r;
}

static const char *status(json_t *r) { return json_string_value(json_object_get(r, "status")); }

int main(void) {
  const char *sd = getenv("NABLA_STDLIB");
  nb_set_stdlib_dir(sd ? sd : "stdlib");
  interp_Out out = { .ud = NULL, .stream = o_stream, .flush = o_flush, .publish = o_publish,
                     .input = o_input, .record = o_record };
  Interp *ip = interp_new(&out);
  int abort_queue = -1;

  TEST("interp/execute-value") {
    json_t *r = exec(ip, "1 + 2", &abort_queue);
    CHECK_STR(status(r), "ok");
    CHECK_INT(json_integer_value(json_object_get(r, "execution_count")), 1);
    CHECK_STR(log_, "execute_input|execute_result");
    CHECK_INT(abort_queue, 0);
    CHECK_INT(records, 1);
    json_decref(r);
  }
  TEST("interp/execute-stream") {
    json_t *r = exec(ip, "print(\"hi\")", &abort_queue);
    CHECK_STR(status(r), "ok");
    CHECK_STR(log_, "execute_input|stream:stdout:hi\n");
    json_decref(r);
  }
  TEST("interp/execute-error-aborts-queue") {
    json_t *r = exec(ip, "undefined_name_xyz", &abort_queue);
    CHECK_STR(status(r), "error");
    CHECK_STR(log_, "execute_input|error");
    CHECK_INT(abort_queue, 1);
    json_decref(r);
  }
  TEST("interp/execute-usage-error-keeps-queue") {
    json_t *r = exec(ip, "%time", &abort_queue);
    CHECK_STR(status(r), "error");
    CHECK_STR(json_string_value(json_object_get(r, "ename")), "UsageError");
    CHECK_INT(abort_queue, 0);
    json_decref(r);
  }
  TEST("interp/execute-input") {
    json_t *r = exec(ip, "input(\"? \")", &abort_queue);
    CHECK_STR(status(r), "ok");
    CHECK(strstr(log_, "execute_result") != NULL, "no execute_result: %s", log_);
    json_decref(r);
  }
  TEST("interp/execute-bad-request") {
    json_t *c = json_pack("{s:i}", "code", 3);
    json_t *r = interp_execute(ip, c, &abort_queue);
    CHECK_STR(json_string_value(json_object_get(r, "ename")), "BadRequest");
    json_decref(c); json_decref(r);
  }
  TEST("interp/is-complete") {
    json_t *c = json_pack("{s:s}", "code", "f(1,");
    json_t *r = interp_is_complete(ip, c);
    CHECK_STR(status(r), "incomplete");
    json_decref(c); json_decref(r);
  }
  TEST("interp/complete") {
    json_t *c = json_pack("{s:s}", "code", "pri");
    json_t *r = interp_complete(ip, c);
    CHECK_STR(status(r), "ok");
    json_t *m = json_object_get(r, "matches");
    int found = 0;
    for (size_t i = 0; i < json_array_size(m); i++) if (!strcmp(json_string_value(json_array_get(m, i)), "print")) found = 1;
    CHECK(found, "print not among the matches");
    json_decref(c); json_decref(r);
  }
  interp_free(ip);
  return t_failed ? 1 : 0;
}
