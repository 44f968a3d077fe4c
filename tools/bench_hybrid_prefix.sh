#!/bin/sh
# bench_hybrid_prefix.sh - the hybrid prefix cache (state snapshot store) on
# one hybrid GGUF, runs interleaved (A B A B ...) with the load average.
#
# Per round, with the store at its default size (new) and without it
# (--state-snapshot-memory 0, the baseline of the same binary; BASE_BIN, when
# given, runs as a third column at its own defaults):
#   1. `bench-engine --prompt-tokens 1040 --shared-prefix 1024 --gen-tokens 8
#      --verify --concurrency 1 --threads 2 --json`: cold and warm time to
#      first token of two different prompts sharing their first 1024 tokens,
#      cached_tokens, mismatches;
#   2. CPU time (user + sys, /usr/bin/time) of `bench-engine --prompt-tokens
#      1040 --gen-tokens 1 --concurrency 1 --threads 2` (two cold prefills):
#      the snapshot copies' cost, comparable under load where wall time is not.
# Prints one JSON object per run, then the ratios: warm speed-up (cold / warm
# TTFT) and prefill CPU new / none (and new / base).
#
#   tools/bench_hybrid_prefix.sh NEW_BIN MODEL.gguf [ROUNDS] [BASE_BIN]
# PROMPT=N SHARED=N change the 1040 / 1024 (a tiny model's short context).
set -eu
[ $# -ge 2 ] || { echo "usage: $0 NEW_BIN MODEL.gguf [ROUNDS] [BASE_BIN]" >&2; exit 2; }
new=$1 model=$2 rounds=${3:-2} base=${4:-}
prompt=${PROMPT:-1040} shared=${SHARED:-1024}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
load() { cut -d' ' -f1 /proc/loadavg; }
# $1 tag, $2 binary, rest: extra flags
run() {
    tag=$1 bin=$2
    shift 2
    l0=$(load)
    "$bin" bench-engine -m "$model" --prompt-tokens "$prompt" --shared-prefix "$shared" \
        --gen-tokens 8 --verify --concurrency 1 --threads 2 --json "$@" 2>"$tmp/err" |
        tail -1 >"$tmp/ttft"
    [ -s "$tmp/ttft" ] || { grep -v '^engine:' "$tmp/err" >&2; exit 1; }
    /usr/bin/time -f "%U %S" -o "$tmp/cpu" "$bin" bench-engine -m "$model" --prompt-tokens "$prompt" \
        --gen-tokens 1 --concurrency 1 --threads 2 --json "$@" >/dev/null 2>&1
    cpu=$(awk '{ printf "%.2f", $1 + $2 }' "$tmp/cpu")
    sed "s/}\$/,\"run\":\"$tag\",\"prefill_cpu_s\":$cpu,\"load\":\"$l0-$(load)\"}/" "$tmp/ttft" |
        tee -a "$tmp/all"
}
for r in $(seq "$rounds"); do
    run new "$new"
    run none "$new" --state-snapshot-memory 0
    [ -z "$base" ] || run base "$base"
done
# ratios over the rounds (means)
awk -F'[,:{}"]+' '
    { for (i = 2; i < NF; i += 2) v[$i] = $(i + 1)
      t = v["run"]; n[t]++; cold[t] += v["ttft_ms_cold"]; warm[t] += v["ttft_ms_warm"]
      cpu[t] += v["prefill_cpu_s"]; cached[t] += v["cached_tokens"]; mis[t] += v["mismatches"] }
    END {
      printf "{\"warm_speedup_new\":%.1f,\"cached_tokens_new\":%.0f,\"mismatches_new\":%d,",
             cold["new"] / warm["new"], cached["new"] / n["new"], mis["new"]
      printf "\"warm_speedup_none\":%.2f,\"prefill_cpu_new_over_none\":%.3f",
             cold["none"] / warm["none"], cpu["new"] / cpu["none"]
      if (n["base"]) printf ",\"warm_speedup_base\":%.2f,\"prefill_cpu_new_over_base\":%.3f",
             cold["base"] / warm["base"], (cpu["new"] / n["new"]) / (cpu["base"] / n["base"])
      printf "}\n" }' "$tmp/all"
