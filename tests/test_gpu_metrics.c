/* test_gpu_metrics.c - /metrics' GPU lines (src/core/gpu_info.h, NVML
 * through dlopen; src/api/metrics.h metrics_gpu): without the driver's
 * library (CI, this machine) the read is an error and the render leaves the
 * GPU gauges out; with it (a GPU machine) they are there and sane. */
#include "test.h"

#include "src/api/metrics.h"
#include "src/core/gpu_info.h"
#include "src/core/omni.h"

#include <stdlib.h>
#include <string.h>

TEST(gpu_info_metrics)
{
    struct gpu_info gi;
    CHECK(gpu_info_read(-1, &gi) < 0);
    const int rc = gpu_info_read(0, &gi);
    struct metrics *m = metrics_new();
    CHECK(m != NULL);
    if (!m)
        return;
    size_t len = 0;
    char *text = metrics_render(m, NULL, "test", "model", &len);
    CHECK(text && !strstr(text, "omniserve_gpu_")); /* no device named: no GPU lines */
    free(text);
    metrics_gpu(m, 0);
    text = metrics_render(m, NULL, "test", "model", &len);
    CHECK(text != NULL);
    if (rc == 0) {
        CHECK(gi.mem_total > 0 && gi.mem_used <= gi.mem_total && gi.util_pct <= 100);
        CHECK_STR_CONTAINS(text, "omniserve_gpu_memory_used_bytes");
        CHECK_STR_CONTAINS(text, "omniserve_gpu_utilization_ratio");
    } else {
        CHECK(rc == OMNI_ERR_UNSUPPORTED || rc == OMNI_ERR_ARG);
        CHECK(text && !strstr(text, "omniserve_gpu_"));
    }
    free(text);
    metrics_free(m);
}
