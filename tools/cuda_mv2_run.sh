#!/bin/bash
# cuda_mv2_run.sh - one GPU call for the batch-1 decode matvec (issue 19,
# docs/gpu.md "Decode at batch 1"): build test_cuda / bench_dev / bench_mv /
# bench_engine_dev, test_cuda on the golden fixtures (default, then the
# PDL launches on the q8_0 models and the backend ops), per-matrix GB/s
# (bench_mv) and bench_dev tg128 on random Llama-3.2-1B Q4_K_M / Q8_0 and
# qwen2.5-7b Q4_K_M files with the old matvec (OMNI_CUDA_MV2=0) and the new
# one's variants interleaved, then (optional) bench-engine, llama.cpp, the
# sanitizer. Run from the repository root with build-h7dev carried
# (llama.cpp/, pcre2/, ggml-vocab-llama-bpe.gguf; see tools/cuda_device_run.sh).
# Writes $OUT/$NAME/: log.txt, results.jsonl (every JSON line), summary.txt.
# Variables: NAME (default f_cuda), RUN_LLAMA=1 (llama.cpp built in the
# background and run on the same files), RUN_ENGINE=1 (bench-engine),
# RUN_SAN=1 (compute-sanitizer), RUN_NSYS=0, DEADLINE_S (default 400: no new
# step after it). (Not SAN, LLAMA...: make reads SAN from the environment.)
set -u
DEV=${DEV:-build-h7dev}
RUN_LLAMA=${RUN_LLAMA:-0}
RUN_ENGINE=${RUN_ENGINE:-0}
RUN_SAN=${RUN_SAN:-0}
RUN_NSYS=${RUN_NSYS:-1}
unset SAN # the Makefile's sanitizer list
DEADLINE_S=${DEADLINE_S:-400}
NAME=${NAME:-f_cuda}
# variants of the new matvec measured beside the old one (env assignments;
# "X=1" is the default; commas join assignments)
VARIANTS=${VARIANTS:-"OMNI_CUDA_MV2_GLU=1024 OMNI_CUDA_MV2_PPT=1"}
VARIANTS7=${VARIANTS7:-"OMNI_CUDA_MV2_GLU=1024"}
# the previous code: k_matvec_q8, no PDL
OLD="OMNI_CUDA_MV2=0 OMNI_CUDA_PDL=0"
MV_VARIANTS=${MV_VARIANTS:-"OMNI_CUDA_MV2=0 X=1"}
RUN_CHECK=${RUN_CHECK:-1}
# the environment of the second test_cuda run, the check and the sanitizer
TEST_ENV=${TEST_ENV:-"OMNI_CUDA_MV2_GLU=1024"}
O=${OUT:-/tmp/out}/$NAME
W=/tmp/cuda_mv2_work
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

NVCC_BIN=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC_BIN")")}
export PATH="$CUDA_HOME/bin:$PATH"
stamp "machine (CUDA_HOME=$CUDA_HOME) commit $(git rev-parse --short HEAD 2>/dev/null)"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader

LBIN="$DEV/llama-build/bin"
if [ "$RUN_LLAMA" = 1 ] && [ ! -x "$LBIN/llama-bench" ]; then
    (cmake -S "$DEV/llama.cpp" -B "$DEV/llama-build" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DLLAMA_BUILD_APP=OFF -DBUILD_SHARED_LIBS=OFF &&
     cmake --build "$DEV/llama-build" --target llama-bench llama-batched-bench -j 9
     echo "llama.cpp build rc $?") > "$W/llama_build.log" 2>&1 &
    llama_pid=$!
fi

M4="$DEV/llama-3.2-1b-q4_k_m.gguf"
M8="$DEV/llama-3.2-1b-q8_0.gguf"
M7="$DEV/qwen2.5-7b-q4_k_m.gguf"
gen() { # shape type file
    [ -f "$3" ] && return 0
    python3 tools/random_model --shape "$1" --type "$2" --vocab "$DEV/ggml-vocab-llama-bpe.gguf" \
        -o "$3" > /dev/null 2>&1
    echo "random_model $1 $2 rc $?"
}
(gen llama-3.2-1b q4_k_m "$M4"; gen llama-3.2-1b q8_0 "$M8"; gen qwen2.5-7b q4_k_m "$M7") \
    > "$W/models.log" 2>&1 &
models_pid=$!
FIXT=()
for m in llama llama3 qwen2 qwen3; do for t in f32 f16 q8_0; do FIXT+=("build-ffix/fixtures/$m-$t.gguf"); done; done
(make -j3 BUILD=build-ffix PYTHON=python3 "${FIXT[@]}" > "$W/fixtures.log" 2>&1;
 echo "fixtures rc $?" >> "$W/fixtures.log") &
fix_pid=$!

MK=(make -k -j6 CUDA=1 CUDA_HOME="$CUDA_HOME" BUILD=build-fcuda BLAS_SHIM=1
    NVCCFLAGS="-O3 -std=c++17 -I. -lineinfo --expt-relaxed-constexpr -gencode arch=compute_90a,code=sm_90a -Xcompiler -Wall,-Wextra"
    EXTRA_CFLAGS="-Itools/bench_only -I$DEV/pcre2/include"
    DEV_LIBS="$DEV/pcre2/lib/libpcre2-8.a -lm -pthread")
TARGETS=(build-fcuda/test_cuda build-fcuda/bench_dev build-fcuda/bench_mv build-fcuda/bench_engine_dev)
stamp "build ${TARGETS[*]}"
timeout 240 "${MK[@]}" "${TARGETS[@]}" > "$W/build.log" 2>&1
echo "build rc $?"
grep -E "error|warning" "$W/build.log" | grep -v "missing initializer" | head -30

wait "$fix_pid"
tail -1 "$W/fixtures.log"
tc() { # label env... -- filter
    local label=$1; shift
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" OMNI_DEV_BACKEND=cuda OMNI_GOLDEN_DIR=build-ffix/fixtures timeout "$(cap 90)" \
        build-fcuda/test_cuda "$@" > "$W/test_cuda.txt" 2>&1
    local rc=$?
    echo "test_cuda $label rc $rc"
    grep -E "FAIL|top-5|passed|skip|error" "$W/test_cuda.txt" | head -40
    echo "test_cuda $label: $(grep -E "passed" "$W/test_cuda.txt" | tail -1)" >> "$SUM"
    return $rc
}
if [ -x build-fcuda/test_cuda ]; then
    stamp "test_cuda (default: the new matvec)"
    if ! tc default X=1 --; then # which of the defaults: PDL off, then the old matvec
        tc "PDL=0" OMNI_CUDA_PDL=0 --
        tc "PDL=1" OMNI_CUDA_PDL=1 --
        tc "MV2=0" OMNI_CUDA_MV2=0 --
    fi
    stamp "test_cuda with PDL launches (the q8_0 models: graphs, fused ops)"
    tc "$TEST_ENV q8" ${TEST_ENV//,/ } -- q8_0
    tc "$TEST_ENV fused" ${TEST_ENV//,/ } -- backend_
fi

stamp "waiting for the model files"
wait "$models_pid"
cat "$W/models.log"
tag() { sed "s/^{/{\"label\":\"$1\",/" | tee -a "$RES"; }
bd() { # label env... -- args
    local label=$1; shift
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" timeout "$(cap 60)" build-fcuda/bench_dev "$@" 2> "$W/bd.err" | tag "$label"
    grep -iE "error|fail" "$W/bd.err" | head -3
}
if [ -x build-fcuda/bench_dev ]; then
    for M in "$M4" "$M8" "$M7"; do
        b=$(basename "$M" .gguf)
        stamp "bench_dev $b: the old matvec ($OLD), the default (pp512 too), variants, the old again"
        bd "$b old" $OLD -- -m "$M" -p 1 -n 128 -r 3
        bd "$b default" X=1 -- -m "$M" -p 512 -n 128 -r 3
        vs=$VARIANTS
        [ "$M" = "$M7" ] && vs=$VARIANTS7
        for v in $vs; do
            [ "$(left)" -lt 90 ] && break
            bd "$b $v" ${v//,/ } -- -m "$M" -p 1 -n 128 -r 3
        done
        bd "$b old again" $OLD -- -m "$M" -p 1 -n 128 -r 3
    done
fi
if [ -x build-fcuda/bench_mv ]; then
    for v in $MV_VARIANTS; do
        [ "$(left)" -lt 90 ] && break
        stamp "bench_mv $v"
        env $v timeout "$(cap 40)" build-fcuda/bench_mv --iters 100 2> "$W/mv.err" | tag "mv $v" |
            python3 -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l)
    print("  %s %-8s %-5s %6d x %5d %7.1f us %7.1f GB/s" % (r["model"], r["matrix"], r["type"], r["rows"], r["cols"], r["us"], r["gb_s"]))'
        tail -2 "$W/mv.err"
    done
fi
if [ -x build-fcuda/bench_dev ]; then
    if [ "$RUN_CHECK" = 1 ] && [ "$(left)" -gt 80 ]; then
        stamp "bench_dev --check 8 (device vs CPU) on the 1B Q4_K_M file, new matvec + PDL"
        env ${TEST_ENV//,/ } timeout "$(cap 60)" build-fcuda/bench_dev -m "$M4" -p 8 -n 8 -r 1 --check 8 2>&1 |
            grep -E '"check"|check' | head -4
    fi
    if [ "$RUN_CHECK" = 1 ] && [ "$(left)" -gt 60 ]; then
        stamp "per-op profile, 7B, 32 decode steps (OMNI_DEV_PROFILE=1, graphs off)"
        OMNI_DEV_PROFILE=1 timeout "$(cap 40)" build-fcuda/bench_dev -m "$M7" -p 1 -n 32 -d 0 -r 1 2>&1 |
            grep profile
    fi
fi
NSYS_BIN=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
if [ "$RUN_NSYS" = 1 ] && [ -n "$NSYS_BIN" ] && [ "$(left)" -gt 60 ]; then
    stamp "nsys: kernel times of 32 decode steps on the 7B file (graphs off, PDL on)"
    OMNI_DEV_GRAPHS=0 env ${TEST_ENV//,/ } timeout "$(cap 50)" "$NSYS_BIN" profile -o "$W/p7" --force-overwrite true \
        --stats=false build-fcuda/bench_dev -m "$M7" -p 1 -n 32 -r 1 > "$W/nsys.txt" 2>&1
    timeout "$(cap 30)" "$NSYS_BIN" stats --report cuda_gpu_kern_sum --format csv "$W/p7.nsys-rep" 2>/dev/null |
        cut -c1-220 | head -30
else
    echo "nsys: not found or no time (${NSYS_BIN:-none})"
fi
if [ "$RUN_ENGINE" = 1 ] && [ -x build-fcuda/bench_engine_dev ] && [ "$(left)" -gt 80 ]; then
    for v in "OMNI_CUDA_MV2=0,OMNI_CUDA_PDL=0" "${ENGINE_ENV:-X=1}"; do
        stamp "bench-engine --device cuda --concurrency 1,16,64 ($v)"
        env ${v//,/ } timeout "$(cap 60)" build-fcuda/bench_engine_dev -m "$M4" --device cuda --concurrency 1,16,64 \
            --prompt-tokens 128 --gen-tokens 64 --json 2> "$W/engine.err" | tag "engine $v"
        tail -2 "$W/engine.err"
    done
fi
if [ "$RUN_LLAMA" = 1 ] && [ -n "${llama_pid:-}" ]; then
    stamp "waiting for llama.cpp"
    while kill -0 "$llama_pid" 2>/dev/null && [ "$(left)" -gt 50 ]; do sleep 3; done
    tail -1 "$W/llama_build.log"
fi
if [ "$RUN_LLAMA" = 1 ] && [ -x "$LBIN/llama-bench" ]; then
    for M in "$M4" "$M8" "$M7"; do
        [ "$(left)" -lt 15 ] && break
        stamp "llama-bench $(basename "$M")"
        timeout "$(cap 60)" "$LBIN/llama-bench" -m "$M" -p 512 -n 128 -r 3 -ngl 99 -o jsonl 2>/dev/null |
            tag llama-bench | grep -o '"n_prompt": [0-9]*, "n_gen": [0-9]*\|"avg_ts": [0-9.e+]*' | tr '\n' ' '
        echo
    done
fi
if [ "$RUN_LLAMA" = 1 ] && [ -x "$LBIN/llama-batched-bench" ] && [ "$(left)" -gt 60 ]; then
    stamp "llama-batched-bench -npp 128 -ntg 64 -npl 1,16,64"
    timeout "$(cap 45)" "$LBIN/llama-batched-bench" -m "$M4" -c 16384 -b 2048 -ub 512 -npp 128 -ntg 64 \
        -npl 1,16,64 -ngl 99 > "$W/llama_batched.txt" 2>&1
    grep -E "^\|" "$W/llama_batched.txt"
    awk -F'|' '/^\|/ && $2+0 > 0 { printf "llama-batched-bench: B %d S_TG %s t/s\n", $4, $9 }' \
        "$W/llama_batched.txt" >> "$SUM"
fi
if [ "$RUN_SAN" = 1 ] && [ -x build-fcuda/test_cuda ] && [ "$(left)" -gt 30 ]; then
    for f in backend_ model_dev_qwen2_q8; do
        stamp "compute-sanitizer memcheck $f (defaults)"
        OMNI_DEV_BACKEND=cuda OMNI_GOLDEN_DIR=build-ffix/fixtures timeout "$(cap 60)" \
            compute-sanitizer --tool memcheck --error-exitcode 9 build-fcuda/test_cuda $f > "$W/san.txt" 2>&1
        r="sanitizer $f rc $?: $(grep -E 'ERROR SUMMARY|passed' "$W/san.txt" | tr '\n' ' ')"
        echo "$r" | tee -a "$SUM"
    done
fi
stamp "done"
[ -n "${llama_pid:-}" ] && kill "$llama_pid" 2>/dev/null
python3 - "$RES" >> "$SUM" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    try:
        r = json.loads(l)
    except ValueError:
        continue
    lab = r.get("label", "")
    if lab == "llama-bench":
        t = "pp%d" % r["n_prompt"] if r.get("n_prompt") else "tg%d" % r["n_gen"]
        print("llama-bench %s %s: %.1f tok/s" % (r.get("model_filename", "").split("/")[-1], t, r["avg_ts"]))
    elif lab.startswith("engine"):
        print("%s concurrency %d: %.1f tok/s (decode step %.3f ms)"
              % (lab, r["concurrency"], r["aggregate_tok_s"], r.get("decode_step_ms", 0)))
    elif r.get("bench") == "mv":
        print("%s %s %s %s: %.1f us %.1f GB/s" % (lab, r["model"], r["matrix"], r["type"], r["us"], r["gb_s"]))
    elif "test" in r:
        extra = " (%.0f GB/s of weights)" % r["weights_gb_s"] if "weights_gb_s" in r else ""
        print("bench_dev %s %s: %.1f tok/s%s" % (lab, r["test"], r["tok_s"], extra))
PY
echo "---- summary"
cat "$SUM"
