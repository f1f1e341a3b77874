/* test_util.h — the tiny harness shared by the lang unit tests:
** one line per test, "PASS: name" or "FAIL: name: why"; exit 1 on failure. */
#ifndef TEST_UTIL_H
#define TEST_UTIL_H
#include <stdio.h>
#include <stdarg.h>
#include <string.h>

static int t_failed, t_cur_failed;
static const char *t_cur;
static char t_why[512];

static void t_fail(const char *fmt, ...) {
  if (t_cur_failed) return;     /* first failure of a test is the one reported */
  va_list ap; va_start(ap, fmt); vsnprintf(t_why, sizeof t_why, fmt, ap); va_end(ap);
  t_cur_failed = 1;
}
#define TEST(name) for (int t_once_ = (t_cur = (name), t_cur_failed = 0, 1); t_once_; t_once_ = 0, t_end())
static void t_end(void) {
  if (t_cur_failed) { printf("FAIL: %s: %s\n", t_cur, t_why); t_failed++; }
  else printf("PASS: %s\n", t_cur);
  fflush(stdout);
}
#define CHECK(cond, ...) do { if (!(cond)) t_fail(__VA_ARGS__); } while (0)
#define CHECK_STR(got, want) do { const char *g_ = (got), *w_ = (want); \
  if (!g_ || strcmp(g_, w_) != 0) t_fail("line %d: got \"%s\", want \"%s\"", __LINE__, g_ ? g_ : "(null)", w_); } while (0)
#define CHECK_INT(got, want) do { long g_ = (long)(got), w_ = (long)(want); \
  if (g_ != w_) t_fail("line %d: %s = %ld, want %ld", __LINE__, #got, g_, w_); } while (0)
#endif
