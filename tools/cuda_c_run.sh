#!/bin/bash
# cuda_c_run.sh - one GPU job for the batch-1 decode step (issue 19,
# docs/gpu.md "Per-op GPU times" / "Decode at batch 1"): build test_cuda /
# bench_dev / bench_engine_dev, test_cuda on the golden fixtures with the
# defaults (and with each variant), per-op GPU times of one-token steps
# (OMNI_CUDA_TIMERS=1) on the 1B and 7B files, bench_dev tg128 with the
# defaults and the variants interleaved (A B A B), then optionally
# bench-engine, llama.cpp on the same files, compute-sanitizer.
# Run from the repository root with build-h7dev carried (llama.cpp/, pcre2/,
# ggml-vocab-llama-bpe.gguf; see tools/cuda_device_run.sh):
#   OUT=/tmp/o NAME=f_c1 VARIANTS="OMNI_CUDA_X=1" bash tools/cuda_c_run.sh
# Writes $OUT/$NAME/: summary.txt (the results, written as they come),
# log.txt, results.jsonl (every JSON line), optime_*.jsonl.
# Variables: VARIANTS (space-separated; commas join env assignments),
# TEST_VARIANTS (those test_cuda runs with; default VARIANTS), TIMERS=1, TIMER_ENVS ("X=1" plus variants to time), RUN_LLAMA, RUN_ENGINE,
# RUN_SAN (SAN_ENV: the sanitizer's env, commas join), RUN_NCU (NCU_FILE: M4, M7, ...;
# NCU_SECTIONS, NCU_SKIP, NCU_COUNT, NCU_TIMEOUT, NCU_LINES), TG_FILES
# (default "M4 M7 M8"; "" none), PP=1 (pp512 with the defaults), ENGINE_ENVS (one
# bench-engine run each), ENGINE_TIMERS=1 (per-op times of bench-engine at
# 64 sequences, per env of ENGINE_TIMER_ENVS), LLAMA_BIN=DIR (llama-bench / llama-batched-bench built
# beforehand: no build in the job, and no llama.cpp when DIR lacks it), LLAMA_FILES (default "M4 M8 M15 M7"),
# LLAMA_ARCH (default 90a) / LLAMA_JOBS (default 8): llama.cpp's build in the job;
# LLAMA_FIRST=1: while llama.cpp builds run only test_cuda and the
# sanitizer, time nothing before it is done, then llama-bench and ours on
# each file (and llama-batched-bench) before the other steps;
# CHECK_ENVS (one `bench_dev --check 8` on the 1B Q4_K_M file each);
# GEN_FILES (default "M4 M7 M8 M15": the random files written);
# TEST_TIMEOUT, SAN_TIMEOUT (s, default 90 and 60: a test_cuda run, a sanitizer run).
# PREBUILT=FILE.tar.xz: test_cuda, bench_dev and bench_engine_dev built
# beforehand (same flags, on the development machine: its nvcc is the same
# 13.0) unpacked into build-fcuda/ and used when they start there (ldd finds
# every library); else built as usual. TG_REPS (default 2): tg128 rounds.
# A variant BIN=PATH runs that bench_dev (e.g. the previous commit's,
# unpacked by the command) in the tg128 rounds instead of build-fcuda's.
# DEADLINE_S (default 290: no new step after it). PROBE=1: tools/cuda_stream_probe.cu
# (single kernels and the 7B chain) into probe.jsonl at the end. M15 is Qwen2.5-1.5B
# Q4_K_M. The headline (ours vs llama.cpp, bandwidth, engine 64/1) is
# written at the top of summary.txt at the end (headline.txt alone too).
set -u
DEV=${DEV:-build-h7dev}
RUN_LLAMA=${RUN_LLAMA:-0}
RUN_ENGINE=${RUN_ENGINE:-0}
RUN_SAN=${RUN_SAN:-0}
TIMERS=${TIMERS:-1}
PP=${PP:-0}
unset SAN # the Makefile's sanitizer list
DEADLINE_S=${DEADLINE_S:-290}
NAME=${NAME:-f_c}
VARIANTS=${VARIANTS:-}
TIMER_ENVS=${TIMER_ENVS:-X=1 $VARIANTS}
O=${OUT:-/tmp/out}/$NAME
W=/tmp/cuda_c_work
mkdir -p "$O" "$W"
exec > >(tee -a "$O/log.txt") 2>&1
RES="$O/results.jsonl"
SUM="$O/summary.txt"
: > "$RES"
: > "$SUM"
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
stamp() { echo "== $(el) s: $*"; }
left() { echo $(( DEADLINE_S - $(el) )); }
cap() { local l; l=$(left); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
say() { echo "$*" | tee -a "$SUM"; }

NVCC_BIN=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC_BIN")")}
export PATH="$CUDA_HOME/bin:$PATH"
say "$NAME: commit $(git rev-parse --short HEAD 2>/dev/null) (+$(git status --porcelain 2>/dev/null | wc -l) changed paths), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), load $(cut -d' ' -f1-3 /proc/loadavg)"
say "variants: ${VARIANTS:-none}"
[ -d "$DEV/llama.cpp" ] || { [ -f "$DEV/llama_src.tgz" ] && tar xzf "$DEV/llama_src.tgz" -C "$DEV"; }

LBIN="$DEV/llama-build/bin"
if [ -n "${LLAMA_BIN:-}" ] && [ -x "$LLAMA_BIN/llama-bench" ]; then
    LBIN=$LLAMA_BIN
    say "llama.cpp: prebuilt $LBIN"
elif [ -n "${LLAMA_BIN:-}" ]; then
    say "llama.cpp: LLAMA_BIN=$LLAMA_BIN has no llama-bench: no llama.cpp in this job"
    RUN_LLAMA=0
fi
if [ "$RUN_LLAMA" = 1 ] && [ ! -x "$LBIN/llama-bench" ]; then
    (cmake -S "$DEV/llama.cpp" -B "$DEV/llama-build" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=${LLAMA_ARCH:-90a} -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DLLAMA_BUILD_APP=OFF -DBUILD_SHARED_LIBS=OFF &&
     cmake --build "$DEV/llama-build" --target llama-bench llama-batched-bench -j "${LLAMA_JOBS:-8}"
     echo "llama.cpp build rc $?") > "$W/llama_build.log" 2>&1 &
    llama_pid=$!
fi

M4="$DEV/llama-3.2-1b-q4_k_m.gguf"
M8="$DEV/llama-3.2-1b-q8_0.gguf"
M7="$DEV/qwen2.5-7b-q4_k_m.gguf"
M15="$DEV/qwen2.5-1.5b-q4_k_m.gguf"
gen() { # shape type file
    [ -f "$3" ] && return 0
    python3 tools/random_model --shape "$1" --type "$2" --vocab "$DEV/ggml-vocab-llama-bpe.gguf" \
        -o "$3" > /dev/null 2>&1
    echo "random_model $1 $2 rc $?"
}
(for mv in ${GEN_FILES:-M4 M7 M8 M15}; do
    case $mv in
    M4) gen llama-3.2-1b q4_k_m "$M4" ;;
    M7) gen qwen2.5-7b q4_k_m "$M7" ;;
    M8) gen llama-3.2-1b q8_0 "$M8" ;;
    M15) gen qwen2.5-1.5b q4_k_m "$M15" ;;
    esac
 done) > "$W/models.log" 2>&1 &
models_pid=$!
FIXT=()
for m in llama llama3 qwen2 qwen3; do for t in f32 f16 q8_0; do FIXT+=("build-ffix/fixtures/$m-$t.gguf"); done; done
(make -j3 BUILD=build-ffix PYTHON=python3 "${FIXT[@]}" > "$W/fixtures.log" 2>&1;
 echo "fixtures rc $?" >> "$W/fixtures.log") &
fix_pid=$!

MK=(make -k -j8 CUDA=1 CUDA_HOME="$CUDA_HOME" BUILD=build-fcuda BLAS_SHIM=1
    NVCCFLAGS="-O3 -std=c++17 -I. -lineinfo --expt-relaxed-constexpr -gencode arch=compute_90a,code=sm_90a -Xcompiler -Wall,-Wextra"
    EXTRA_CFLAGS="-Itools/bench_only -I$DEV/pcre2/include"
    DEV_LIBS="$DEV/pcre2/lib/libpcre2-8.a -lm -pthread")
TARGETS=(build-fcuda/test_cuda build-fcuda/bench_dev build-fcuda/bench_engine_dev)
pre_ok=0
if [ -n "${PREBUILT:-}" ] && [ -f "$PREBUILT" ]; then
    mkdir -p build-fcuda && tar xJf "$PREBUILT" -C build-fcuda && pre_ok=1
    for t in "${TARGETS[@]}"; do
        { [ -x "$t" ] && ! ldd "$t" | grep -q "not found"; } || pre_ok=0
    done
    say "prebuilt $PREBUILT: $([ $pre_ok = 1 ] && echo used || echo unusable, building)"
    [ $pre_ok = 1 ] && ldd build-fcuda/bench_dev | grep -E "cublas|cudart" | tee -a "$SUM"
fi
if [ $pre_ok = 0 ]; then
    stamp "build ${TARGETS[*]}"
    rm -f "${TARGETS[@]}"
    timeout 200 "${MK[@]}" "${TARGETS[@]}" > "$W/build.log" 2>&1
    say "build rc $? at $(el) s"
    grep -E "error|warning" "$W/build.log" | grep -v "missing initializer" | head -30 | tee -a "$SUM"
fi

wait "$fix_pid"
tail -1 "$W/fixtures.log"
tc() { # label env... -- filter
    local label=$1; shift
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" OMNI_DEV_BACKEND=cuda OMNI_GOLDEN_DIR=build-ffix/fixtures timeout "$(cap "${TEST_TIMEOUT:-90}")" \
        build-fcuda/test_cuda "$@" > "$W/test_cuda.txt" 2>&1
    local rc=$?
    grep -E "FAIL|top-5|passed|skip|error" "$W/test_cuda.txt" | head -40
    say "test_cuda $label rc $rc: $(grep -E "passed" "$W/test_cuda.txt" | tail -1)"
    grep -E "FAIL" "$W/test_cuda.txt" | head -5 >> "$SUM"
    return $rc
}
san() {
    [ "$RUN_SAN" = 1 ] && [ -x build-fcuda/test_cuda ] && [ "$(left)" -gt 30 ] || return 0
    for f in backend_ model_dev_qwen2_q8; do
        stamp "compute-sanitizer memcheck $f (defaults)"
        SE=${SAN_ENV:-X=1}
        env ${SE//,/ } OMNI_DEV_BACKEND=cuda OMNI_GOLDEN_DIR=build-ffix/fixtures timeout "$(cap "${SAN_TIMEOUT:-60}")" \
            compute-sanitizer --tool memcheck --error-exitcode 9 build-fcuda/test_cuda $f > "$W/san.txt" 2>&1
        say "sanitizer ${SAN_ENV:-defaults} $f rc $?: $(grep -E 'ERROR SUMMARY|passed' "$W/san.txt" | tr '\n' ' ')"
    done
    RUN_SAN=0
}
if [ -x build-fcuda/test_cuda ]; then
    stamp "test_cuda (defaults)"
    tc defaults X=1 --
    for v in ${TEST_VARIANTS-$VARIANTS}; do
        [ "$(left)" -lt 150 ] && break
        tc "$v" ${v//,/ } --
    done
fi

if [ "${LLAMA_FIRST:-0}" = 1 ] && [ -n "${llama_pid:-}" ]; then
    san
    stamp "waiting for llama.cpp before timing anything"
    while kill -0 "$llama_pid" 2>/dev/null && [ "$(left)" -gt 120 ]; do sleep 3; done
    say "llama.cpp: $(tail -1 "$W/llama_build.log") at $(el) s"
fi
stamp "waiting for the model files"
wait "$models_pid"
cat "$W/models.log"
# llama-bench on each file with ours right after it, then llama-batched-bench
llama_runs() {
    if [ "$RUN_LLAMA" = 1 ] && [ -x "$LBIN/llama-bench" ]; then
        for mv in ${LLAMA_FILES:-M4 M8 M15 M7}; do
            M=${!mv}
            [ "$(left)" -lt 15 ] && break
            stamp "llama-bench $(basename "$M")"
            timeout "$(cap 60)" "$LBIN/llama-bench" -m "$M" -p 512 -n 128 -r 3 -ngl 99 -o jsonl 2>/dev/null |
                tag llama-bench | python3 -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l)
    t = "pp%d" % r["n_prompt"] if r.get("n_prompt") else "tg%d" % r["n_gen"]
    print("llama-bench %s %s: %.1f tok/s" % (r.get("model_filename", "").split("/")[-1], t, r["avg_ts"]))' |
                tee -a "$SUM"
            # ours right after, same file (A B)
            bd "$(basename "$M" .gguf) X=1 after llama" X=1 -- -m "$M" -p 1 -n 128 -r 3
            [ "$PP" = 1 ] && bd "$(basename "$M" .gguf) X=1 pp after llama" X=1 -- -m "$M" -p 512 -n 1 -r 3
        done
    fi
    if [ "$RUN_LLAMA" = 1 ] && [ -x "$LBIN/llama-batched-bench" ] && [ "$(left)" -gt 50 ]; then
        stamp "llama-batched-bench -npp 128 -ntg 64 -npl 1,16,64"
        timeout "$(cap 60)" "$LBIN/llama-batched-bench" -m "$M4" -c 16384 -b 2048 -ub 512 -npp 128 -ntg 64 \
            -npl 1,16,64 -ngl 99 --output-format jsonl > "$W/llama_batched.txt" 2>&1
        grep '^{' "$W/llama_batched.txt" | tag llama-batched | python3 -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l)
    print("llama-batched-bench B %d: S_TG %.1f tok/s" % (r["pl"], r["speed_tg"]))' | tee -a "$SUM"
    fi
    RUN_LLAMA=0
}
tag() { local l=${1//\//_}; sed "s/^{/{\"label\":\"$l\",/" | tee -a "$RES"; }
bd() { # label env... -- args
    local label=$1; shift
    local envs=() bin=build-fcuda/bench_dev
    while [ "$1" != "--" ]; do
        case $1 in BIN=*) bin=${1#BIN=} ;; *) envs+=("$1") ;; esac
        shift
    done
    shift
    env "${envs[@]}" timeout "$(cap 60)" "$bin" "$@" 2> "$W/bd.err" | tag "$label" |
        python3 -c '
import json, sys
for l in sys.stdin:
    try:
        r = json.loads(l)
    except ValueError:
        continue
    if "tok_s" in r:
        gb = " (%.0f GB/s of weights)" % r["weights_gb_s"] if "weights_gb_s" in r else ""
        print("bench_dev %s %s: %.1f tok/s%s" % (r["label"], r.get("test", "?"), r["tok_s"], gb))' |
        tee -a "$SUM"
    grep -iE "error|fail|cuda:" "$W/bd.err" | head -3 | tee -a "$SUM"
}
[ "${LLAMA_FIRST:-0}" = 1 ] && llama_runs
for ev in ${CHECK_ENVS:-}; do
    [ -x build-fcuda/bench_dev ] && [ "$(left)" -gt 60 ] || break
    stamp "bench_dev --check 8 ($ev)"
    env ${ev//,/ } timeout "$(cap 60)" build-fcuda/bench_dev -m "$M4" -p 1 -n 1 -r 1 --check 8 2>&1 |
        grep "\"test\":\"check\"" | sed "s/^/check $ev: /" | tee -a "$SUM"
done
# per-op GPU times of one-token steps (graphs off, a spin before each step)
if [ "$TIMERS" = 1 ] && [ -x build-fcuda/bench_dev ]; then
    for M in "$M4" "$M7"; do
        for v in $TIMER_ENVS; do
            [ "$(left)" -lt 100 ] && break
            b=$(basename "$M" .gguf)
            stamp "per-op times $b $v"
            f="$O/optime_${b}_${v//[^A-Za-z0-9_]/_}.jsonl"
            env ${v//,/ } OMNI_CUDA_TIMERS=1 OMNI_DEV_GRAPHS=0 timeout "$(cap 40)" build-fcuda/bench_dev \
                -m "$M" -p 1 -n 32 -r 1 2>&1 >/dev/null | grep '^{"bench":"optime' > "$f"
            python3 - "$f" "$b $v" <<'PY' | tee -a "$SUM"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
step = [r for r in rows if r["bench"] == "optime_step"]
ops = sorted((r for r in rows if r["bench"] == "optime"), key=lambda r: -r["us_per_step"])
if step:
    s = step[0]
    print("optime %s: %d steps, %.1f us a step on the GPU (ops %.1f, gaps %.1f)" %
          (sys.argv[2], s["steps"], s["step_us"], s["ops_us"], s["gap_us"]))
for r in ops[:14]:
    gb = " %6.0f GB/s" % r["gb_s"] if r["gb_s"] else ""
    print("  %-52s %8.1f us/step %5.1f calls/step %7.2f us avg%s" %
          (r["op"][:52], r["us_per_step"], r["calls"] / max(1, step[0]["steps"] if step else 1), r["us_avg"], gb))
PY
        done
    done
fi
# (a spin of 20 ms a step: a 64-sequence step takes the host longer than 4 ms to queue)
for ev in ${ENGINE_TIMER_ENVS:-X=1}; do
    [ "${ENGINE_TIMERS:-0}" = 1 ] && [ -x build-fcuda/bench_engine_dev ] && [ "$(left)" -gt 60 ] || break
    stamp "per-op times of bench-engine, 64 sequences ($ev)"
    f="$O/optime_engine64_${ev//[^A-Za-z0-9_]/_}.jsonl"
    env ${ev//,/ } OMNI_CUDA_TIMERS=1 OMNI_CUDA_TIMERS_SPIN_US=${ENGINE_SPIN_US:-20000} timeout "$(cap 60)" \
        build-fcuda/bench_engine_dev -m "$M4" --device cuda \
        --concurrency 64 --prompt-tokens 128 --gen-tokens 64 --json 2>&1 >/dev/null |
        grep '^{"bench":"optime' > "$f"
    python3 - "$f" "$ev" <<'PY' | tee -a "$SUM"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ops = sorted((r for r in rows if r["bench"] == "optime"), key=lambda r: -r["calls"] * r["us_avg"])
for r in rows:
    if r["bench"] == "optime_step":
        print("optime engine64 %s: %s" % (sys.argv[2], json.dumps(r)))
for r in ops[:16]:
    print("  %-52s %6d calls %8.2f us avg %s" % (r["op"][:52], r["calls"], r["us_avg"], ("%.0f GB/s" % r["gb_s"]) if r.get("gb_s") else ""))
PY
done
# tg128: defaults and variants interleaved, A B A B
if [ -x build-fcuda/bench_dev ]; then
    for mv in ${TG_FILES-M4 M7 M8}; do
        M=${!mv}
        [ "$(left)" -lt 60 ] && break
        b=$(basename "$M" .gguf)
        stamp "bench_dev tg128 $b: defaults, variants, twice"
        for rep in $(seq 1 "${TG_REPS:-2}"); do
            for v in X=1 $VARIANTS; do
                [ "$(left)" -lt 40 ] && break
                bd "$b ${v} #$rep" ${v//,/ } -- -m "$M" -p 1 -n 128 -r 3
            done
        done
    done
fi
if [ "$PP" = 1 ] && [ -x build-fcuda/bench_dev ]; then
    for mv in ${TG_FILES-M4 M7 M8}; do
        M=${!mv}
        [ "$(left)" -lt 60 ] && break
        stamp "bench_dev pp512 $(basename "$M" .gguf)"
        bd "$(basename "$M" .gguf) X=1" X=1 -- -m "$M" -p 512 -n 1 -r 3
    done
fi
for ev in ${ENGINE_ENVS:-X=1}; do
    [ "$RUN_ENGINE" = 1 ] && [ -x build-fcuda/bench_engine_dev ] && [ "$(left)" -gt 60 ] || break
    stamp "bench-engine --device cuda --concurrency 1,16,64 ($ev)"
    env ${ev//,/ } timeout "$(cap 60)" build-fcuda/bench_engine_dev -m "$M4" --device cuda --concurrency 1,16,64 \
        --prompt-tokens 128 --gen-tokens 64 --json 2> "$W/engine.err" | tag "engine $ev" |
        python3 -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l)
    print("engine %s concurrency %d: %.1f tok/s (decode step %.3f ms)" % (r["label"], r["concurrency"], r["aggregate_tok_s"], r.get("decode_step_ms", 0)))' |
        tee -a "$SUM"
    tail -2 "$W/engine.err"
done
NCU_BIN=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ "${RUN_NCU:-1}" = 1 ] && [ -n "$NCU_BIN" ] && [ -x build-fcuda/bench_dev ] && [ "$(left)" -gt 90 ]; then
    NF=${NCU_FILE:-M4}
    stamp "ncu: the mv2 kernels, $(basename "${!NF}") (${NCU_ENV:-X=1})"
    NSEC=()
    for sec in ${NCU_SECTIONS:-SpeedOfLight LaunchStats Occupancy}; do NSEC+=(--section "$sec"); done
    env ${NCU_ENV:-X=1} OMNI_DEV_GRAPHS=0 timeout "$(cap "${NCU_TIMEOUT:-50}")" "$NCU_BIN" --kernel-name "regex:k_mv2" \
        --launch-skip "${NCU_SKIP:-200}" --launch-count "${NCU_COUNT:-8}" "${NSEC[@]}" \
        build-fcuda/bench_dev -m "${!NF}" -p 1 -n 8 -r 1 > "$O/ncu.txt" 2>&1
    grep -E "k_mv2|Throughput|Duration|Registers|Achieved Occupancy|Theoretical Occupancy|Block Limit|Stall|Hit Rate|Issued|Eligible" "$O/ncu.txt" |
        head -${NCU_LINES:-80} | tee -a "$SUM"
else
    say "ncu: ${NCU_BIN:-not found} (or no time)"
fi
if [ "$RUN_LLAMA" = 1 ] && [ -n "${llama_pid:-}" ]; then
    stamp "waiting for llama.cpp"
    while kill -0 "$llama_pid" 2>/dev/null && [ "$(left)" -gt 40 ]; do sleep 3; done
    say "llama.cpp: $(tail -1 "$W/llama_build.log")"
fi
llama_runs
san
# PROBE=1: what one kernel can read on this card, and the 7B step's reads
# as pure streams (tools/cuda_stream_probe.cu)
if [ "${PROBE:-0}" = 1 ] && [ "$(left)" -gt 40 ]; then
    nvcc -O3 -gencode arch=compute_90a,code=sm_90a -o "$W/probe" tools/cuda_stream_probe.cu &&
        { timeout "$(cap 30)" "$W/probe"; timeout "$(cap 30)" "$W/probe" chain; } > "$O/probe.jsonl" 2>&1
    say "stream probe rc $?: $(wc -l < "$O/probe.jsonl") lines in probe.jsonl"
fi
stamp "done"
[ -n "${llama_pid:-}" ] && kill "$llama_pid" 2>/dev/null
# the headline: ours (defaults, best run) against llama.cpp on each file, first in summary.txt
python3 tools/cuda_c_headline.py "$RES" "$SUM" > "$O/headline.txt"
cat "$O/headline.txt" "$SUM" > "$O/summary.new" && mv "$O/summary.new" "$SUM"
echo "---- summary"
cat "$SUM"
