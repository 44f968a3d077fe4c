/* bench_engine_only.c - `bench_engine_only ARGS` = `omniserve bench-engine
 * ARGS` without the server's libraries, for the GPU host's CPU
 * (tools/device_intel_i.sh, step "engine"): the engine, the forward pass and
 * pcre2 only; the sgemm is bench_only.c's (or sgemm_fast.c's). Built by hand,
 * not by make (the script has the file list). */
#include "src/cli/cli.h"

int main(int argc, char **argv)
{
    return cli_bench_engine(argc, argv);
}
