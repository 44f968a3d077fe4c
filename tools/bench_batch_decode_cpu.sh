#!/bin/sh
# bench_batch_decode_cpu.sh - CPU time per kernel family of batched decode,
# two omniserve binaries interleaved (A B A B ...), one thread.
#
# Each round runs `omniserve bench -t 1 -p 8 -n 16 --batch-decode 8` under
# perf (cpu-clock samples at 1 kHz = thread CPU ms) and prints the samples of
# the q4_0/q5_0 GEMM (2 x 4 tiles or wt8), the q8_0 GEMM (2 x 4 tiles, act2, act4 or act8: the output
# projection), the K-quant GEMM (tiles, packing, a8), the per-row dots and the total, with the
# load average. CPU time of identical work is comparable under load where
# wall-clock is not (docs/benchmarks.md, "Where an 8-row decode step goes").
#
#   tools/bench_batch_decode_cpu.sh BASE_BIN NEW_BIN MODEL.gguf [ROUNDS]
set -eu
[ $# -ge 3 ] || { echo "usage: $0 BASE_BIN NEW_BIN MODEL.gguf [ROUNDS]" >&2; exit 2; }
base=$1 new=$2 model=$3 rounds=${4:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for r in $(seq "$rounds"); do
    for b in "$base" "$new"; do
        perf record -q -e cpu-clock -F 1000 -o "$tmp/p.data" "$b" bench -m "$model" -t 1 -p 8 -n 16 \
            --reps 1 --no-bandwidth --batch-decode 8 >/dev/null 2>&1
        perf report -i "$tmp/p.data" --no-children --sort symbol -n 2>/dev/null | grep -v '^#' |
            awk -v b="$b" -v l="$(cut -d' ' -f1 /proc/loadavg)" '
            NF >= 4 { n = $2; s = $4; tot += n
                if (s ~ /act[248]_q8_0|act8_rows|tile_q8_0/) q8 += n
                else if (s == "group_rows" || s ~ /act8|wt8_|tile_q4_0|tile_q5_0|omni_x86_gemm_q8_0_avx2/) q40 += n
                else if (s ~ /tiles_Q|pack_dwords|gemm_k_pack|gemm_k_run|a8_/) k += n
                else if (s ~ /vec_dot/) dot += n }
            END { printf "{\"bin\":\"%s\",\"total_ms\":%d,\"q4_0_q5_0_gemm_ms\":%d,\"q8_0_gemm_ms\":%d,\"kquant_gemm_ms\":%d,\"dots_ms\":%d,\"load\":%s}\n", b, tot, q40, q8, k, dot, l }'
    done
done
