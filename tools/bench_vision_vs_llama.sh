#!/bin/bash
# bench_vision_vs_llama.sh - encoder time per image of omniserve (bench-vision
# --encode-only) and llama.cpp's llama-mtmd-cli on the same mmproj file and
# image, alternating ROUNDS times so both see the same machine load; prints
# one JSON line per run and a summary line with the medians and their ratio
# (llama.cpp / omniserve: > 1 means omniserve is faster).
#
#   tools/bench_vision_vs_llama.sh OMNISERVE MMPROJ.gguf IMAGE LLAMA_BIN_DIR LM.gguf [THREADS] [ROUNDS]
#
# llama-mtmd-cli needs a language model of the projector's width (any, e.g.
# tools/random_model --shape llama-3.2-1b --layers 1 for a 2048-wide
# projector); it runs without warmup and generates one token; its "image
# slice encoded in N ms" (or "mtmd batch encoding done in N ms") line is the
# encoder time.
set -euo pipefail
if [ $# -lt 5 ]; then
    sed -n '2,14p' "$0"
    exit 2
fi
OMNI=$1 MMPROJ=$2 IMAGE=$3 LLAMA=$4 LM=$5 THREADS=${6:-2} ROUNDS=${7:-2}
ours=() theirs=()
for r in $(seq 1 "$ROUNDS"); do
    j=$("$OMNI" bench-vision --encode-only --mmproj "$MMPROJ" --image "$IMAGE" -t "$THREADS" --reps 1 --json 2>/dev/null)
    echo "$j"
    ours+=("$(echo "$j" | sed -n 's/.*"encode_ms": \([0-9.]*\).*/\1/p')")
    log=$("$LLAMA/llama-mtmd-cli" -m "$LM" --mmproj "$MMPROJ" --image "$IMAGE" -p "Describe." -n 1 \
          -t "$THREADS" --no-warmup --temp 0 2>&1 || true)
    ms=$(echo "$log" | sed -n -e 's/.*image slice encoded in \([0-9.]*\) ms.*/\1/p' \
                              -e 's/.*batch encoding done in \([0-9.]*\) ms.*/\1/p' | head -1)
    toks=$(echo "$log" | sed -n 's/.*n_tokens = \([0-9]*\).*/\1/p' | head -1)
    if [ -z "$ms" ]; then
        echo "$log" | tail -20 >&2
        echo "bench_vision_vs_llama: no encode time from llama-mtmd-cli" >&2
        exit 1
    fi
    echo "{\"tool\": \"llama-mtmd-cli\", \"threads\": $THREADS, \"encode_ms\": $ms, \"image_tokens\": \"${toks:-?}\"}"
    theirs+=("$ms")
done
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
o=$(med "${ours[@]}") t=$(med "${theirs[@]}")
echo "{\"summary\": true, \"rounds\": $ROUNDS, \"threads\": $THREADS, \"omniserve_encode_ms\": $o, \"llama_encode_ms\": $t, \"ratio_llama_over_omniserve\": $(awk -v a="$t" -v b="$o" 'BEGIN {printf "%.3f", a / b}')}"
