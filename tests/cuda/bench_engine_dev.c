/* bench_engine_dev.c - `omniserve bench-engine` as a binary of its own: the
 * engine and the forward (CPU, or the GPU with --device cuda) without the
 * server's libraries (libwebsockets, ffmpeg, espeak), for a GPU machine that
 * has none of our Debian packages (tools/cuda_device_run.sh, docs/gpu.md). */
#include "src/cli/cli.h"

int main(int argc, char **argv)
{
    /* cli_bench_engine reads its options from argv[1] on, as after the
     * "bench-engine" word of omniserve's command line */
    return cli_bench_engine(argc, argv);
}
