#!/bin/sh
# bench_suite.sh - `make bench`: omniserve's speed on real-shape random models
# beside a baseline measured in the same session, so ratios mean something on
# a shared, noisy machine.
#
# Baseline: with PEERS=DIR, the llama.cpp and whisper.cpp builds found under
# DIR (llama-bench, whisper-cli; never committed); otherwise omniserve built
# from BASE_REV (default HEAD~1, the previous commit) in a temporary git
# worktree (cached in $BENCH_DIR/base-<sha>/). Each model runs ours then the
# baseline, REPS repetitions each, medians.
#   LLM:    `omniserve bench` (pp P, tg N, BATCH_DECODE sequences decoded
#           together, bandwidth_fraction) vs llama-bench -p P -n N or the base
#   speech: `omniserve bench-stt` over STT_AUDIO vs whisper-cli's timings or the base
#   vision: `omniserve bench-vision` (smolvlm-256m) vs the base (no peer)
# Writes one JSON line per comparison to stdout and $RESULTS/lines.jsonl, then
# $RESULTS/results.json (machine: CPU model, ISA level, cores, read bandwidth;
# the commit; every line) and $RESULTS/results.md (the table docs/benchmarks.md
# shows). Ratios above 1: omniserve is faster. Models are generated once into
# $BENCH_DIR. SHAPES= / STT_SHAPES= (empty) / VISION=0 skip a part.
set -e
OMNI=${OMNI:-build/omniserve}
PYTHON=${PYTHON:-/usr/bin/python3}
BENCH_DIR=${BENCH_DIR:-build/bench}
RESULTS=${RESULTS:-bench}
THREADS=${THREADS:-2}
P=${P:-128}
N=${N:-32}
REPS=${REPS:-3}
BATCH_DECODE=${BATCH_DECODE:-8}
SHAPES=${SHAPES-"qwen2.5-0.5b:q8_0 qwen2.5-0.5b:q4_k_m"}
STT_SHAPES=${STT_SHAPES-"whisper-tiny.en:q8_0"}
VISION=${VISION:-1}
PEERS=${PEERS:-}
BASE_REV=${BASE_REV:-HEAD~1}
mkdir -p "$BENCH_DIR" "$RESULTS"
LINES="$RESULTS/lines.jsonl"
: > "$LINES"
emit() { echo "$1"; echo "$1" >> "$LINES"; }

# ---- the baseline --------------------------------------------------------------
LLAMA_BENCH=; WHISPER_CLI=; BASE=; BASE_NAME=
if [ -n "$PEERS" ]; then
    LLAMA_BENCH=$(find -L "$PEERS" -maxdepth 5 -name llama-bench -type f -perm -u+x 2>/dev/null | head -1)
    WHISPER_CLI=$(find -L "$PEERS" -maxdepth 5 -name whisper-cli -type f -perm -u+x 2>/dev/null | head -1)
    echo "bench: peers: llama-bench '${LLAMA_BENCH:-none}', whisper-cli '${WHISPER_CLI:-none}'" >&2
    BASE_NAME=peers
else
    sha=$(git rev-parse --short "$BASE_REV")
    BASE="$BENCH_DIR/base-$sha/omniserve"
    BASE_NAME="omniserve@$sha"
    if [ ! -x "$BASE" ]; then
        wt=$(mktemp -d /tmp/omni-bench-base.XXXXXX)
        echo "bench: building the baseline $BASE_REV ($sha) in $wt" >&2
        git worktree add -q --detach "$wt" "$sha"
        make -C "$wt" -j"${JOBS:-2}" BUILD=build build/omniserve >&2
        mkdir -p "$BENCH_DIR/base-$sha"
        cp "$wt/build/omniserve" "$BASE"
        git worktree remove --force "$wt"
    fi
fi

# ---- language models ---------------------------------------------------------------
for st in $SHAPES; do
    shape=${st%%:*}; type=${st##*:}
    model="$BENCH_DIR/$shape-$type.gguf"
    if [ ! -f "$model" ]; then
        echo "bench: generating $model" >&2
        "$PYTHON" tools/random_model --shape "$shape" --type "$type" -o "$model" 2>&1 | tail -1 >&2
    fi
    echo "bench: $shape $type ($THREADS threads): omniserve, then $BASE_NAME" >&2
    ours=$("$OMNI" bench -m "$model" -p "$P" -n "$N" --reps "$REPS" --threads "$THREADS" --batch-decode "$BATCH_DECODE" --json)
    if [ -n "$BASE" ]; then
        base=$("$BASE" bench -m "$model" -p "$P" -n "$N" --reps "$REPS" --threads "$THREADS" --batch-decode "$BATCH_DECODE" --json 2>/dev/null | tail -1)
    elif [ -n "$LLAMA_BENCH" ]; then
        base=$("$LLAMA_BENCH" -m "$model" -p "$P" -n "$N" -r "$REPS" -t "$THREADS" -o jsonl 2>/dev/null |
            "$PYTHON" -c 'import json, sys
r = [json.loads(l) for l in sys.stdin if l.startswith("{")]
pp = [x["avg_ts"] for x in r if x["n_prompt"] and not x["n_gen"]]
tg = [x["avg_ts"] for x in r if x["n_gen"] and not x["n_prompt"]]
print(json.dumps({"pp_tok_s": pp[0] if pp else 0, "tg_tok_s": tg[0] if tg else 0, "bd_tok_s": 0}))')
    else
        base='{}'
    fi
    [ -n "$base" ] || base='{}'
    emit "$("$PYTHON" - "$shape" "$type" "$BASE_NAME" "$ours" "$base" <<'PY'
import json, sys
shape, qtype, bname, ours, base = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), json.loads(sys.argv[5])
bname = "llama.cpp" if bname == "peers" else bname
ratio = lambda a, b: round(a / b, 3) if a and b else None
print(json.dumps({"bench": "llm", "shape": shape, "type": qtype, "baseline": bname,
                  "level": ours["cpu"], "threads": ours["threads"], "p": ours["p"], "n": ours["n"],
                  "pp_tok_s": ours["pp_tok_s"], "tg_tok_s": ours["tg_tok_s"],
                  "base_pp_tok_s": base.get("pp_tok_s"), "base_tg_tok_s": base.get("tg_tok_s"),
                  "pp_ratio": ratio(ours["pp_tok_s"], base.get("pp_tok_s")),
                  "tg_ratio": ratio(ours["tg_tok_s"], base.get("tg_tok_s")),
                  "bandwidth_gb_s": ours.get("bandwidth_gb_s"),
                  "bandwidth_fraction": ours.get("bandwidth_fraction"),
                  "batch_decode": ours["batch_decode"], "bd_tok_s": ours["bd_tok_s"],
                  "bd_x": ratio(ours["bd_tok_s"], ours["tg_tok_s"]),
                  "base_bd_tok_s": base.get("bd_tok_s") or None,
                  "bd_ratio": ratio(ours["bd_tok_s"], base.get("bd_tok_s"))}))
PY
)"
done

# ---- speech ------------------------------------------------------------------------
STT_AUDIO=${STT_AUDIO:-$BENCH_DIR/noise-10s.wav}
if [ -n "$STT_SHAPES" ] && [ ! -f "$STT_AUDIO" ]; then
    "$PYTHON" - "$STT_AUDIO" <<'PY'
import sys, wave
import numpy as np
x = (0.05 * np.random.default_rng(0).standard_normal(160000) * 32767).astype("<i2")
with wave.open(sys.argv[1], "wb") as w:
    w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000); w.writeframes(x.tobytes())
PY
fi
for st in $STT_SHAPES; do
    shape=${st%%:*}; type=${st##*:}
    model="$BENCH_DIR/$shape-$type.bin"
    if [ ! -f "$model" ]; then
        echo "bench: generating $model" >&2
        "$PYTHON" tools/random_model --shape "$shape" --type "$type" -o "$model" 2>&1 | tail -1 >&2
    fi
    echo "bench: $shape $type speech ($THREADS threads): omniserve, then $BASE_NAME" >&2
    ours=$("$OMNI" bench-stt -m "$model" --file "$STT_AUDIO" -t "$THREADS" --reps "$REPS" --json)
    if [ -n "$BASE" ]; then
        base=$("$BASE" bench-stt -m "$model" --file "$STT_AUDIO" -t "$THREADS" --reps "$REPS" --json 2>/dev/null | tail -1)
    elif [ -n "$WHISPER_CLI" ]; then
        # whisper.cpp's own timings (greedy, no temperature fallback): encode per run, decode per token
        base=$(for r in $(seq "$REPS"); do "$WHISPER_CLI" -m "$model" -f "$STT_AUDIO" -t "$THREADS" -bo 1 -nf 2>&1; done |
            "$PYTHON" -c 'import json, re, statistics, sys
enc, dec = [], []
for l in sys.stdin:
    m = re.search(r"(encode|decode|batchd) time =\s*([\d.]+) ms /\s*(\d+) runs", l)
    if not m:
        continue
    ms, runs = float(m.group(2)), int(m.group(3))
    if m.group(1) == "encode":
        enc.append(ms / max(runs, 1))
    elif runs:
        dec.append(ms / runs)
print(json.dumps({"encoder_ms": statistics.median(enc) if enc else 0,
                  "decoder_ms_per_token": statistics.median(dec) if dec else 0}))')
    else
        base='{}'
    fi
    [ -n "$base" ] || base='{}'
    emit "$("$PYTHON" - "$shape" "$type" "$BASE_NAME" "$ours" "$base" <<'PY'
import json, sys
shape, qtype, bname, ours, base = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), json.loads(sys.argv[5])
bname = "whisper.cpp" if bname == "peers" else bname
inv = lambda a, b: round(b / a, 3) if a and b else None   # time: base / ours
print(json.dumps({"bench": "stt", "shape": shape, "type": qtype, "baseline": bname,
                  "level": ours["cpu"], "threads": ours["threads"],
                  "encoder_ms": ours["encoder_ms"], "decoder_ms_per_token": ours["decoder_ms_per_token"],
                  "rtf": ours["rtf"], "base_encoder_ms": base.get("encoder_ms"),
                  "base_decoder_ms_per_token": base.get("decoder_ms_per_token"),
                  "encoder_ratio": inv(ours["encoder_ms"], base.get("encoder_ms")),
                  "decoder_ratio": inv(ours["decoder_ms_per_token"], base.get("decoder_ms_per_token"))}))
PY
)"
done

# ---- vision (no peer: against the base binary only) ---------------------------------
VISION_IMAGE=${VISION_IMAGE:-../shared/images/test-1.jpeg}
VISION_VIDEO=${VISION_VIDEO:-../shared/video/sample.mp4}
VISION_LM_TYPE=${VISION_LM_TYPE:-q8_0}
if [ "$VISION" = 1 ] && [ -f "$VISION_IMAGE" ] && [ -f "$VISION_VIDEO" ]; then
    vlm="$BENCH_DIR/smolvlm-256m-$VISION_LM_TYPE.gguf"
    vmm="$BENCH_DIR/smolvlm-256m-mmproj-f16.gguf"
    [ -f "$vlm" ] || "$PYTHON" tools/random_model --shape smolvlm-256m --type "$VISION_LM_TYPE" -o "$vlm" 2>&1 | tail -1 >&2
    [ -f "$vmm" ] || "$PYTHON" tools/random_model --shape smolvlm-256m-mmproj --type f16 -o "$vmm" 2>&1 | tail -1 >&2
    echo "bench: smolvlm-256m vision ($THREADS threads)" >&2
    args="-m $vlm --mmproj $vmm --image $VISION_IMAGE --video $VISION_VIDEO --threads $THREADS --reps $REPS -n $N --json"
    ours=$("$OMNI" bench-vision $args)
    base='{}'
    [ -n "$BASE" ] && base=$("$BASE" bench-vision $args 2>/dev/null | tail -1)
    [ -n "$base" ] || base='{}'
    emit "$("$PYTHON" - "$BASE_NAME" "$ours" "$base" <<'PY'
import json, sys
bname, ours, base = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
inv = lambda a, b: round(b / a, 3) if a and b else None
ratio = lambda a, b: round(a / b, 3) if a and b else None
print(json.dumps({"bench": "vision", "shape": "smolvlm-256m", "baseline": bname if base else None,
                  "level": ours["cpu"], "threads": ours["threads"],
                  "encode_first_ms": ours["encode_first_ms"], "repeat_ratio": ours["repeat_ratio"],
                  "repeat_ok": ours["repeat_ratio"] < 0.05, "video_encode_ms": ours["video_encode_ms"],
                  "pp_tok_s": ours["pp_tok_s"], "tg_tok_s": ours["tg_tok_s"],
                  "encoder_ratio": inv(ours["encode_first_ms"], base.get("encode_first_ms")),
                  "video_encoder_ratio": inv(ours["video_encode_ms"], base.get("video_encode_ms")),
                  "pp_ratio": ratio(ours["pp_tok_s"], base.get("pp_tok_s")),
                  "tg_ratio": ratio(ours["tg_tok_s"], base.get("tg_tok_s"))}))
PY
)"
fi

# ---- results.json + results.md ----------------------------------------------------------
"$PYTHON" - "$LINES" "$RESULTS" "$(git rev-parse --short HEAD)" "$BASE_NAME" "$THREADS" <<'PY'
import json, os, platform, sys
lines, out, commit, bname, threads = sys.argv[1:6]
rows = [json.loads(l) for l in open(lines) if l.startswith("{")]
cpu = "?"
try:
    for l in open("/proc/cpuinfo"):
        if l.startswith("model name"):
            cpu = l.split(":", 1)[1].strip(); break
except OSError:
    pass
llm = [r for r in rows if r["bench"] == "llm"]
machine = {"cpu": cpu, "isa_level": rows[0]["level"] if rows else None, "logical_cpus": os.cpu_count(),
           "threads": int(threads), "read_bandwidth_gb_s": llm[0]["bandwidth_gb_s"] if llm else None,
           "load_average": os.getloadavg()[0], "system": platform.platform()}
json.dump({"commit": commit, "baseline": bname, "machine": machine, "results": rows},
          open(os.path.join(out, "results.json"), "w"), indent=1)
f = lambda x, d=1: ("%.*f" % (d, x)) if isinstance(x, (int, float)) else "-"
md = ["Machine: %s, %s kernels, %s logical CPUs, %d threads, read bandwidth %s GB/s, load %.1f; commit %s; baseline %s." % (
      cpu, machine["isa_level"], machine["logical_cpus"], int(threads), f(machine["read_bandwidth_gb_s"]),
      machine["load_average"], commit, "llama.cpp / whisper.cpp" if bname == "peers" else bname), "",
      "| model | pp tok/s | base | ratio | tg tok/s | base | ratio | bandwidth fraction | %s-seq decode x one |" % (llm[0]["batch_decode"] if llm else "B"),
      "|---|---|---|---|---|---|---|---|---|"]
for r in llm:
    md.append("| %s %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (r["shape"], r["type"], f(r["pp_tok_s"]), f(r["base_pp_tok_s"]),
              f(r["pp_ratio"], 2), f(r["tg_tok_s"]), f(r["base_tg_tok_s"]), f(r["tg_ratio"], 2),
              f(r["bandwidth_fraction"], 2), f(r["bd_x"], 2)))
stt = [r for r in rows if r["bench"] == "stt"]
if stt:
    md += ["", "| speech model | encoder ms | base | ratio | decoder ms/token | base | ratio |", "|---|---|---|---|---|---|---|"]
    for r in stt:
        md.append("| %s %s | %s | %s | %s | %s | %s | %s |" % (r["shape"], r["type"], f(r["encoder_ms"]), f(r["base_encoder_ms"]),
                  f(r["encoder_ratio"], 2), f(r["decoder_ms_per_token"], 2), f(r["base_decoder_ms_per_token"], 2), f(r["decoder_ratio"], 2)))
vis = [r for r in rows if r["bench"] == "vision"]
if vis:
    md += ["", "| vision | first encode ms | ratio | video encode ms | ratio | repeat / first |", "|---|---|---|---|---|---|"]
    for r in vis:
        md.append("| %s | %s | %s | %s | %s | %s |" % (r["shape"], f(r["encode_first_ms"]), f(r["encoder_ratio"], 2),
                  f(r["video_encode_ms"]), f(r["video_encoder_ratio"], 2), f(r["repeat_ratio"], 3)))
md.append("")
md.append("Ratios: omniserve over the baseline for tok/s, baseline over omniserve for times (above 1: omniserve faster).")
open(os.path.join(out, "results.md"), "w").write("\n".join(md) + "\n")
print("\n".join(md))
PY
echo "bench: wrote $RESULTS/results.json and $RESULTS/results.md" >&2
