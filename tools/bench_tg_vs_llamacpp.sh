#!/bin/sh
# bench_tg_vs_llamacpp.sh - decode speed (tg64, 2 threads) of omniserve and
# llama.cpp on the same GGUF files, interleaved A B A B per file so that load
# from other processes hits both alike; optionally a second omniserve binary
# (BASE) in the same rounds, for before/after ratios.
#
#   tools/bench_tg_vs_llamacpp.sh [rounds] FILE.gguf...
#
# Environment: OMNI (default build/omniserve), BASE (another omniserve
# binary, or empty), LLAMA_BENCH (default /tmp/llama.cpp/build/bin/llama-bench),
# THREADS (2), N (64). Per run: omniserve `bench -p 16 -n N --reps 3` (median
# of 3) and `llama-bench -p 0 -n N -r 3` (mean of 3), as in the quiet passes
# of docs/benchmarks.md. One JSON line per run (with the 1-minute load
# average), then per file the medians over the rounds and the ratios
# omniserve / llama.cpp (> 1: omniserve faster) and omniserve / BASE.
set -eu
ROUNDS=${1:?usage: bench_tg_vs_llamacpp.sh ROUNDS FILE.gguf...}
shift
OMNI=${OMNI:-build/omniserve}
BASE=${BASE:-}
LLAMA_BENCH=${LLAMA_BENCH:-/tmp/llama.cpp/build/bin/llama-bench}
THREADS=${THREADS:-2}
N=${N:-64}
export LD_LIBRARY_PATH="$(dirname "$LLAMA_BENCH")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
load() { cut -d' ' -f1 /proc/loadavg; }
omni_tg() { # binary file -> tg tok/s
    "$1" bench -m "$2" -t "$THREADS" -p 16 -n "$N" --reps 3 --no-bandwidth --json 2>/dev/null |
        python3 -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["tg_tok_s"])'
}
for f in "$@"; do
    for r in $(seq "$ROUNDS"); do
        for who in omni base llama; do
            [ "$who" = base ] && [ -z "$BASE" ] && continue
            l=$(load)
            case $who in
            omni) tg=$(omni_tg "$OMNI" "$f") ;;
            base) tg=$(omni_tg "$BASE" "$f") ;;
            llama) tg=$("$LLAMA_BENCH" -m "$f" -t "$THREADS" -p 0 -n "$N" -r 3 -o jsonl 2>/dev/null |
                        python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["avg_ts"])') ;;
            esac
            echo "{\"file\": \"$f\", \"round\": $r, \"who\": \"$who\", \"tg\": $tg, \"load\": $l}" |
                tee -a "$tmp/runs"
        done
    done
done
python3 - "$tmp/runs" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
for f in dict.fromkeys(r["file"] for r in runs):
    med = {w: statistics.median([r["tg"] for r in runs if r["file"] == f and r["who"] == w])
           for w in ("omni", "base", "llama") if any(r["file"] == f and r["who"] == w for r in runs)}
    loads = [r["load"] for r in runs if r["file"] == f]
    out = {"file": f, "omni_tg": med["omni"], "llama_tg": round(med["llama"], 3),
           "omni_vs_llama": round(med["omni"] / med["llama"], 3),
           "load": [min(loads), max(loads)]}
    if "base" in med:
        out.update(base_tg=med["base"], omni_vs_base=round(med["omni"] / med["base"], 3))
    print(json.dumps(out))
PY
