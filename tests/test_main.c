/* test_main.c - runs every registered unit test; last line "N passed, N failed, N skipped".
 *
 * Each test runs on a thread of its own, on a stack this runner maps for it
 * (as large as the main thread's, so that unbounded recursion still crashes
 * where it did), with a deadline of $OMNI_TEST_TIMEOUT_S seconds (default
 * 300, 0 = none). When the test function has returned (passed, failed or
 * skipped), the cleanups it registered with test_defer run, latest first,
 * and the CPU kernel level goes back to the one the runner started with
 * (OMNI_CPU applied). A failed CHECK can leave an engine behind whose thread
 * still calls back into the test's locals: those land on the test's own
 * stack, kept unchanged until the cleanups have stopped that thread (and
 * kept mapped for good when the test failed). A test or its cleanups past
 * the deadline end the run with "TIMEOUT <name> after N s" and the summary
 * line: a hung thread cannot be stopped, so the tests after it do not run. */
#include "test.h"

#include "src/core/cpu.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_TESTS 4096
#define DEFAULT_TIMEOUT_S 300.0
#define GUARD_BYTES ((size_t)64 << 10)
/* Stack left unused between the thread's entry and the test function: what
 * the thread runs after the test returned (signalling the runner, its exit)
 * stays in this gap and does not overwrite the test's locals. */
#define STACK_GAP_BYTES (64 << 10)

struct test_case {
    const char *name, *file;
    test_fn fn;
};

static struct test_case tests[MAX_TESTS];
static int n_tests;
static atomic_int cur_failed, cur_skipped;
static char skip_reason[256];

/* Cleanups of the running test: registered and released on its thread, run
 * by the runner after it returned. */
struct cleanup {
    void (*fn)(void *);
    void *arg;
};
static pthread_mutex_t cleanup_mu = PTHREAD_MUTEX_INITIALIZER;
static struct cleanup *cleanups; /* {cleanup_mu} */
static int n_cleanups, cap_cleanups; /* {cleanup_mu} */

void test_register(const char *name, test_fn fn, const char *file)
{
    if (n_tests < MAX_TESTS)
        tests[n_tests++] = (struct test_case){ name, file, fn };
}

void test_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "    %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    atomic_store(&cur_failed, 1);
}

int test_failed_now(void) { return atomic_load(&cur_failed); }

void test_skip(const char *why)
{
    atomic_store(&cur_skipped, 1);
    snprintf(skip_reason, sizeof skip_reason, "%s", why);
}

void test_defer(void (*fn)(void *), void *arg)
{
    if (!arg)
        return;
    pthread_mutex_lock(&cleanup_mu);
    if (n_cleanups == cap_cleanups) {
        int cap = cap_cleanups ? 2 * cap_cleanups : 32;
        struct cleanup *c = realloc(cleanups, (size_t)cap * sizeof *c);
        if (!c) {
            fprintf(stderr, "test_defer: out of memory\n");
            abort();
        }
        cleanups = c;
        cap_cleanups = cap;
    }
    cleanups[n_cleanups++] = (struct cleanup){ fn, arg };
    pthread_mutex_unlock(&cleanup_mu);
}

void test_release(void *arg)
{
    if (!arg)
        return;
    struct cleanup c = { NULL, NULL };
    pthread_mutex_lock(&cleanup_mu);
    for (int i = n_cleanups - 1; i >= 0; i--)
        if (cleanups[i].arg == arg) {
            c = cleanups[i];
            memmove(cleanups + i, cleanups + i + 1, (size_t)(n_cleanups - i - 1) * sizeof c);
            n_cleanups--;
            break;
        }
    pthread_mutex_unlock(&cleanup_mu);
    if (c.fn)
        c.fn(c.arg);
    else
        test_fail(__FILE__, __LINE__, "test_release(%p): no cleanup registered for it", arg);
}

/* Every cleanup still registered, latest first. */
static void run_cleanups(void *unused)
{
    (void)unused;
    for (;;) {
        pthread_mutex_lock(&cleanup_mu);
        struct cleanup c = n_cleanups ? cleanups[--n_cleanups] : (struct cleanup){ NULL, NULL };
        pthread_mutex_unlock(&cleanup_mu);
        if (!c.fn)
            return;
        c.fn(c.arg);
    }
}

static char shared_dir[1024];

static void probe_shared_dir(void)
{
    const char *env = getenv("OMNI_SHARED");
    snprintf(shared_dir, sizeof shared_dir, "%s", env ? env : "../shared");
    struct stat st;
    if (stat(shared_dir, &st) != 0 || !S_ISDIR(st.st_mode))
        shared_dir[0] = 0;
}

const char *test_shared_dir(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT; /* tests call it from their threads too */
    pthread_once(&once, probe_shared_dir);
    return shared_dir[0] ? shared_dir : NULL;
}

/* A ring of 8 path buffers per thread: a test's threads each get their own
 * (one ring shared by all handed two threads one buffer: see
 * whisper_batch_espeak_transcripts' history). */
static const char *slot_path(const char *base, const char *rel)
{
    static _Thread_local char bufs[8][2048];
    static _Thread_local int next;
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s", base ? base : ".", rel);
    return b;
}

const char *test_fixture(const char *rel) { return slot_path("tests/fixtures", rel); }
const char *test_shared(const char *rel) { return slot_path(test_shared_dir(), rel); }

const char *test_golden(const char *rel)
{
    const char *dir = getenv("OMNI_GOLDEN_DIR");
    return slot_path(dir ? dir : "build/fixtures", rel);
}

char *test_env_save(const char *name)
{
    const char *v = getenv(name);
    return v ? strdup(v) : NULL;
}

void test_env_restore(const char *name, char *saved)
{
    if (saved)
        setenv(name, saved, 1);
    else
        unsetenv(name);
    free(saved);
}

const char *test_tmpdir(void)
{
    static char dir[256];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/omni-test-XXXXXX");
        if (!mkdtemp(dir))
            snprintf(dir, sizeof dir, "/tmp");
    }
    return dir;
}

char *test_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = 0;
        if (len)
            *len = (size_t)n;
    }
    return buf;
}

float *test_read_floats(const char *path, size_t n)
{
    size_t len;
    char *buf = test_read_file(path, &len);
    if (!buf || len != n * sizeof(float)) {
        free(buf);
        return NULL;
    }
    return (float *)buf;
}

double test_max_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m))
            m = d; /* NaN propagates */
    }
    return m;
}

// ---- running one test -------------------------------------------------------

static pthread_mutex_t run_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t run_cv;
static bool run_done; /* {run_mu} */

struct job {
    void (*fn)(void *);
    void *arg;
};

static __attribute__((noinline)) void call_below_gap(struct job *j)
{
    char gap[STACK_GAP_BYTES];
    __asm__ volatile("" : : "r"(gap) : "memory"); /* the gap stays in this frame, */
    j->fn(j->arg);
    __asm__ volatile("" : : "r"(gap) : "memory"); /* and the call is no tail call */
}

static void *job_main(void *p)
{
    call_below_gap(p);
    pthread_mutex_lock(&run_mu);
    run_done = true;
    pthread_cond_broadcast(&run_cv);
    pthread_mutex_unlock(&run_mu);
    return NULL;
}

static void call_test(void *fn) { ((struct test_case *)fn)->fn(); }

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* fn(arg) on a new thread (on stack when not NULL); 0 once it returned, -1
 * if it is still running at deadline_s (0 = no deadline). */
static int run_job(void (*fn)(void *), void *arg, void *stack, size_t stack_bytes,
                   double deadline_s)
{
    struct job j = { fn, arg };
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    if (stack)
        pthread_attr_setstack(&attr, stack, stack_bytes);
    else
        pthread_attr_setstacksize(&attr, stack_bytes);
    pthread_mutex_lock(&run_mu);
    run_done = false;
    pthread_mutex_unlock(&run_mu);
    pthread_t th;
    int rc = pthread_create(&th, &attr, job_main, &j);
    pthread_attr_destroy(&attr);
    if (rc != 0) { /* no thread: run it here */
        job_main(&j);
        return 0;
    }
    struct timespec until = { 0, 0 };
    if (deadline_s > 0) {
        until.tv_sec = (time_t)deadline_s;
        until.tv_nsec = (long)((deadline_s - (double)until.tv_sec) * 1e9);
    }
    pthread_mutex_lock(&run_mu);
    while (!run_done) {
        if (deadline_s <= 0)
            pthread_cond_wait(&run_cv, &run_mu);
        else if (pthread_cond_timedwait(&run_cv, &run_mu, &until) == ETIMEDOUT && !run_done)
            break;
    }
    const bool done = run_done;
    pthread_mutex_unlock(&run_mu);
    if (!done)
        return -1;
    pthread_join(th, NULL);
    return 0;
}

/* Runs are not stopped, threads cannot be killed: say which test hung, close
 * with the summary and leave without waiting for anything. */
static void __attribute__((noreturn))
timed_out(const struct test_case *t, double timeout_s, const char *where, int passed, int failed,
          int skipped, int not_run)
{
    dprintf(2, "\n  TIMEOUT %s after %.0f s%s\n  FAIL %s (%s)\n", t->name, timeout_s, where,
            t->name, t->file);
    if (not_run)
        dprintf(2, "%d tests not run after the timeout\n", not_run);
    dprintf(1, "%d passed, %d failed, %d skipped\n", passed, failed + 1, skipped);
    _exit(1);
}

static double timeout_from_env(void)
{
    const char *env = getenv("OMNI_TEST_TIMEOUT_S");
    if (!env || !*env)
        return DEFAULT_TIMEOUT_S;
    char *end;
    double v = strtod(env, &end);
    if (*end || !(v >= 0)) {
        fprintf(stderr, "note: OMNI_TEST_TIMEOUT_S=%s is not a number of seconds; using %.0f\n",
                env, DEFAULT_TIMEOUT_S);
        return DEFAULT_TIMEOUT_S;
    }
    return v;
}

int main(int argc, char **argv)
{
    const char *filter = argc > 1 ? argv[1] : NULL;
    int passed = 0, failed = 0, skipped = 0;
    setvbuf(stdout, NULL, _IOLBF, 0); /* nothing left in a buffer if a timeout ends the run */
    if (!test_shared_dir())
        fprintf(stderr, "note: ../shared not found; tests that need it are skipped\n");
    const double timeout_s = timeout_from_env();
    const int cpu_level = omni_cpu_level(); /* OMNI_CPU applied */
    struct rlimit rl;
    size_t stack_bytes = (size_t)8 << 20;
    if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur >= ((rlim_t)1 << 20) && rl.rlim_cur <= ((rlim_t)1 << 30))
        stack_bytes = (size_t)rl.rlim_cur & ~(size_t)0xffff;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&run_cv, &ca);
    pthread_condattr_destroy(&ca);
    int n_selected = 0;
    for (int i = 0; i < n_tests; i++)
        n_selected += !filter || strstr(tests[i].name, filter) || strstr(tests[i].file, filter);
    for (int i = 0, done = 0; i < n_tests; i++) {
        if (filter && !strstr(tests[i].name, filter) && !strstr(tests[i].file, filter))
            continue;
        done++;
        atomic_store(&cur_failed, 0);
        atomic_store(&cur_skipped, 0);
        fprintf(stderr, "  %-50s ", tests[i].name);
        fflush(stderr);
        const double t0 = now_s(), deadline = timeout_s > 0 ? t0 + timeout_s : 0;
        char *map = mmap(NULL, GUARD_BYTES + stack_bytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
        if (map == MAP_FAILED)
            map = NULL;
        else
            mprotect(map, GUARD_BYTES, PROT_NONE);
        if (run_job(call_test, &tests[i], map ? map + GUARD_BYTES : NULL, stack_bytes,
                    deadline) != 0)
            timed_out(&tests[i], timeout_s, "", passed, failed, skipped, n_selected - done);
        if (run_job(run_cleanups, NULL, NULL, stack_bytes, deadline) != 0)
            timed_out(&tests[i], timeout_s, " (in its cleanups)", passed, failed, skipped,
                      n_selected - done);
        if (omni_cpu_level() != cpu_level)
            omni_cpu_set_level(cpu_level);
        const double dt = now_s() - t0;
        char took[32] = "";
        if (dt >= 5)
            snprintf(took, sizeof took, " (%.0f s)", dt);
        if (atomic_load(&cur_failed)) {
            fprintf(stderr, "  FAIL %s (%s)%s\n", tests[i].name, tests[i].file, took);
            failed++;
        } else if (atomic_load(&cur_skipped)) {
            fprintf(stderr, "skip (%s)\n", skip_reason);
            skipped++;
        } else {
            fprintf(stderr, "ok%s\n", took);
            passed++;
        }
        /* a failed test's threads may still write to its stack: keep it */
        if (map && !atomic_load(&cur_failed))
            munmap(map, GUARD_BYTES + stack_bytes);
    }
    fflush(stderr);
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
