/* test.h - the tiny unit-test framework every tests/test_<module>.c uses.
 *
 *   TEST(gguf_rejects_truncated) {
 *       CHECK(gguf_open_memory(buf, 10, "x", err, sizeof err) == NULL);
 *       CHECK_STR_CONTAINS(err, "truncated");
 *   }
 *
 * Tests register themselves at load time; tests/test_main.c runs them all (or
 * those whose name contains argv[1]) and prints "N passed, N failed, N skipped"
 * as its last line. A failed CHECK reports file:line and ends that test.
 *
 * A CHECK returns from the test, so what the test made before it is freed by
 * cleanups, not by the frees at its end: register each engine, thread pool or
 * thread-owning object once made, and release it where the test freed it.
 *
 *   struct engine *e = start(m, &ep);
 *   CHECK(e);
 *   test_defer(free_engine, e);   // static void free_engine(void *e) { engine_free(e); }
 *   ...
 *   test_release(e);              // in place of engine_free(e)
 *
 * Each test runs on a thread of its own with a deadline ($OMNI_TEST_TIMEOUT_S,
 * default 300 s); after it the runner runs its cleanups and puts the CPU
 * kernel level (omni_cpu_set_level) back as it was (tests/test_main.c). */
#ifndef OMNI_TEST_H
#define OMNI_TEST_H

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef void (*test_fn)(void);
void test_register(const char *name, test_fn fn, const char *file);
void test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void test_skip(const char *why);
int test_failed_now(void);

/* Runs fn(arg) once the current test has returned, passed, failed or
 * skipped; cleanups run latest first (so an engine registered after its
 * model is freed before it). A NULL arg registers nothing. Call it from the
 * test's own thread. */
void test_defer(void (*fn)(void *), void *arg);
/* Runs the latest cleanup registered for arg now and forgets it: the free
 * of an object the test is done with before its end. A NULL arg does
 * nothing; an arg with no cleanup fails the test. */
void test_release(void *arg);

/* ../shared (or $OMNI_SHARED) if it exists, else NULL: tests that need real
 * data call SKIP_IF_NO_SHARED() first. */
const char *test_shared_dir(void);
/* Path of a file under tests/fixtures (a buffer of the calling thread's
 * ring of 8: valid for the next 7 such calls on that thread). */
const char *test_fixture(const char *rel);
/* Path under ../shared (the same ring). */
const char *test_shared(const char *rel);
/* Environment switches read when something is made (a backend): the
 * current value of name as a copy (NULL: unset), and name put back to it
 * (unset for NULL; frees saved). */
char *test_env_save(const char *name);
void test_env_restore(const char *name, char *saved);
/* A fresh temporary directory for this test run (created once). */
const char *test_tmpdir(void);
/* Read a whole file; caller frees. NULL if missing. */
char *test_read_file(const char *path, size_t *len);
/* Path of a generated golden fixture: $OMNI_GOLDEN_DIR/rel, else
 * build/fixtures/rel (make golden-fixtures); the same ring. */
const char *test_golden(const char *rel);
/* A file of exactly n native floats; caller frees. NULL if missing or of
 * another size. */
float *test_read_floats(const char *path, size_t n);
/* Largest |a[i] - b[i]| over n values; a NaN anywhere makes it NaN, so a
 * `<= tol` check fails. */
double test_max_diff(const float *a, const float *b, size_t n);

#define TEST(name)                                                            \
    static void name(void);                                                   \
    __attribute__((constructor)) static void test_reg_##name(void)            \
    {                                                                         \
        test_register(#name, name, __FILE__);                                 \
    }                                                                         \
    static void name(void)

#define CHECK(cond)                                                           \
    do {                                                                      \
        if (!(cond)) {                                                        \
            test_fail(__FILE__, __LINE__, "CHECK(%s)", #cond);                \
            return;                                                           \
        }                                                                     \
    } while (0)

#define CHECK_MSG(cond, ...)                                                  \
    do {                                                                      \
        if (!(cond)) {                                                        \
            test_fail(__FILE__, __LINE__, __VA_ARGS__);                       \
            return;                                                           \
        }                                                                     \
    } while (0)

#define CHECK_EQ(a, b)                                                        \
    do {                                                                      \
        long long a_ = (long long)(a), b_ = (long long)(b);                   \
        if (a_ != b_) {                                                       \
            test_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b,   \
                      a_, b_);                                                \
            return;                                                           \
        }                                                                     \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                 \
    do {                                                                      \
        double a_ = (a), b_ = (b);                                            \
        if (!(fabs(a_ - b_) <= (tol))) {                                      \
            test_fail(__FILE__, __LINE__, "%s ~ %s: %.9g vs %.9g (tol %g)",   \
                      #a, #b, a_, b_, (double)(tol));                         \
            return;                                                           \
        }                                                                     \
    } while (0)

#define CHECK_STR_EQ(a, b)                                                    \
    do {                                                                      \
        const char *a_ = (a), *b_ = (b);                                      \
        if (!a_ || !b_ || strcmp(a_, b_) != 0) {                              \
            test_fail(__FILE__, __LINE__, "%s == %s: \"%s\" != \"%s\"", #a,   \
                      #b, a_ ? a_ : "(null)", b_ ? b_ : "(null)");            \
            return;                                                           \
        }                                                                     \
    } while (0)

#define CHECK_STR_CONTAINS(hay, needle)                                       \
    do {                                                                      \
        const char *h_ = (hay), *n_ = (needle);                               \
        if (!h_ || !strstr(h_, n_)) {                                         \
            test_fail(__FILE__, __LINE__, "\"%s\" does not contain \"%s\"",   \
                      h_ ? h_ : "(null)", n_);                                \
            return;                                                           \
        }                                                                     \
    } while (0)

#define SKIP(why)                                                             \
    do {                                                                      \
        test_skip(why);                                                       \
        return;                                                               \
    } while (0)

#define SKIP_IF_NO_SHARED()                                                   \
    do {                                                                      \
        if (!test_shared_dir())                                               \
            SKIP("../shared not present");                                    \
    } while (0)

#endif
