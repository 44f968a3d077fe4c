/* test_main.c - runs every registered unit test; last line "N passed, N failed, N skipped". */
#include "test.h"

#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_TESTS 4096

struct test_case {
    const char *name, *file;
    test_fn fn;
};

static struct test_case tests[MAX_TESTS];
static int n_tests;
static int cur_failed, cur_skipped;
static char skip_reason[256];

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
    cur_failed = 1;
}

int test_failed_now(void) { return cur_failed; }

void test_skip(const char *why)
{
    cur_skipped = 1;
    snprintf(skip_reason, sizeof skip_reason, "%s", why);
}

const char *test_shared_dir(void)
{
    static char dir[1024];
    static int probed;
    if (!probed) {
        probed = 1;
        const char *env = getenv("OMNI_SHARED");
        snprintf(dir, sizeof dir, "%s", env ? env : "../shared");
        struct stat st;
        if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
            dir[0] = 0;
    }
    return dir[0] ? dir : NULL;
}

static const char *slot_path(const char *base, const char *rel)
{
    static char bufs[8][1024];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, 1024, "%s/%s", base ? base : ".", rel);
    return b;
}

const char *test_fixture(const char *rel) { return slot_path("tests/fixtures", rel); }
const char *test_shared(const char *rel) { return slot_path(test_shared_dir(), rel); }

const char *test_golden(const char *rel)
{
    const char *dir = getenv("OMNI_GOLDEN_DIR");
    return slot_path(dir ? dir : "build/fixtures", rel);
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

int main(int argc, char **argv)
{
    const char *filter = argc > 1 ? argv[1] : NULL;
    int passed = 0, failed = 0, skipped = 0;
    if (!test_shared_dir())
        fprintf(stderr, "note: ../shared not found; tests that need it are skipped\n");
    for (int i = 0; i < n_tests; i++) {
        if (filter && !strstr(tests[i].name, filter) && !strstr(tests[i].file, filter))
            continue;
        cur_failed = cur_skipped = 0;
        fprintf(stderr, "  %-50s ", tests[i].name);
        fflush(stderr);
        tests[i].fn();
        if (cur_failed) {
            fprintf(stderr, "  FAIL %s (%s)\n", tests[i].name, tests[i].file);
            failed++;
        } else if (cur_skipped) {
            fprintf(stderr, "skip (%s)\n", skip_reason);
            skipped++;
        } else {
            fprintf(stderr, "ok\n");
            passed++;
        }
    }
    fflush(stderr);
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
