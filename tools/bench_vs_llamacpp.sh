#!/bin/sh
# bench_vs_llamacpp.sh - omniserve's and llama.cpp's prefill and decode speed on
# the same GGUF, run alternately in one session (ABAB..., so that load from
# other processes hits both alike), with the bytes a decoded token reads.
#
#   tools/bench_vs_llamacpp.sh FILE.gguf [rounds]
#
# Environment: OMNI (default build/omniserve), LLAMA_BENCH (default
# /tmp/llama.cpp/build/bin/llama-bench), THREADS (2), P (128), N (32).
# Prints one JSON line per round and a summary line with the medians and the
# ratios omniserve / llama.cpp (> 1: omniserve faster), plus the load average
# (a busy machine makes both slower and llama.cpp's spinning threads more so).
set -eu
FILE=${1:?usage: bench_vs_llamacpp.sh FILE.gguf [rounds]}
ROUNDS=${2:-3}
OMNI=${OMNI:-build/omniserve}
LLAMA_BENCH=${LLAMA_BENCH:-/tmp/llama.cpp/build/bin/llama-bench}
THREADS=${THREADS:-2}
P=${P:-128}
N=${N:-32}
export LD_LIBRARY_PATH="$(dirname "$LLAMA_BENCH")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for r in $(seq "$ROUNDS"); do
    "$LLAMA_BENCH" -m "$FILE" -t "$THREADS" -p "$P" -n "$N" -r 1 -o json > "$tmp/l.json" 2>/dev/null
    "$OMNI" bench -m "$FILE" -p "$P" -n "$N" --threads "$THREADS" --reps 1 --no-bandwidth --json \
        > "$tmp/o.json" 2>/dev/null
    python3 - "$tmp/l.json" "$tmp/o.json" "$r" <<'PY' | tee -a "$tmp/rounds"
import json, os, sys
l = json.load(open(sys.argv[1]))
o = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
lpp = next(x["avg_ts"] for x in l if x["n_prompt"] > 0)
ltg = next(x["avg_ts"] for x in l if x["n_gen"] > 0)
print(json.dumps({"round": int(sys.argv[3]), "omni_pp": o["pp_tok_s"], "omni_tg": o["tg_tok_s"],
                  "llama_pp": round(lpp, 3), "llama_tg": round(ltg, 3),
                  "decode_bytes": o["decode_bytes"], "loadavg": os.getloadavg()[0]}))
PY
done
python3 - "$tmp/rounds" "$FILE" <<'PY'
import json, statistics, sys
rs = [json.loads(x) for x in open(sys.argv[1])]
med = {k: statistics.median(r[k] for r in rs) for k in ("omni_pp", "omni_tg", "llama_pp", "llama_tg", "loadavg")}
print(json.dumps({"file": sys.argv[2], "rounds": len(rs), **{k: round(v, 3) for k, v in med.items()},
                  "decode_mib_per_token": round(rs[0]["decode_bytes"] / 2**20, 1),
                  "ratio_pp": round(med["omni_pp"] / med["llama_pp"], 3),
                  "ratio_tg": round(med["omni_tg"] / med["llama_tg"], 3)}))
PY
