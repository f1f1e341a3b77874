/*
** tn.h — tiny test harness for tests/tensor_nn.
** A test is a void function; CHECK fails it with a message and returns.
** Output contract: "PASS: name" / "FAIL: name: why" / "SKIP: name: why".
*/
#ifndef TN_H
#define TN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct tn_test { const char *name; void (*fn)(void); } tn_test;

void tn_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void tn_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
bool tn_done(void);                       /* has the current test failed or skipped? */
const char *tn_path(const char *name);    /* path in the per-run temp dir (static buffer ring) */
double tn_urand(void);                    /* deterministic uniform [0,1) */

#define CHECK(c, ...) do { if (!(c)) { tn_fail(__FILE__, __LINE__, __VA_ARGS__); return; } } while (0)
#define CHECK_CLOSE(a, b, tol, what) do { double a_ = (a), b_ = (b); \
    if (!(fabs(a_ - b_) <= (tol) * (1.0 + fabs(b_)))) { \
      tn_fail(__FILE__, __LINE__, "%s: got %.9g, want %.9g", (what), a_, b_); return; } } while (0)
#define SKIP(...) do { tn_skip(__VA_ARGS__); return; } while (0)

/* each test file exports a NULL-terminated table */
extern const tn_test tn_tests_safetensors[];
extern const tn_test tn_tests_npy[];
extern const tn_test tn_tests_csv[];
extern const tn_test tn_tests_nn[];
extern const tn_test tn_tests_conv[];
extern const tn_test tn_tests_sort[];
extern const tn_test tn_tests_atomic[];

#endif
