#!/bin/bash
# cuda_decode_run.sh - one GPU call for the decode-speed work of issue 19
# (docs/gpu.md "Numbers"): build test_cuda / bench_dev / bench_engine_dev
# (no server libraries), test_cuda on the golden fixtures (converted there),
# compute-sanitizer on a short run, bench_dev pp512 / tg128 on random
# Llama-3.2-1B Q4_K_M and Q8_0 files (fused ops on and off, and tg at depth
# 128), bench-engine --device cuda --concurrency 1,16,64, the qwen2.5-7b
# Q4_K_M shape, and llama.cpp's llama-bench + llama-batched-bench on the
# same files (built in the background; LLAMA=0 skips it).
#
# Run from the repository root with build-h7dev carried (llama.cpp/, pcre2/,
# ggml-vocab-llama-bpe.gguf; see tools/cuda_device_run.sh):
#   run(command="tools/cuda_decode_run.sh", carry=["build-h7dev"])
# Writes $OUT/$NAME/ (NAME default f_cuda): log.txt (everything), results.jsonl
# (every JSON line of ours and llama.cpp's), summary.txt. Variables: LLAMA=0,
# Q7B=0 (no 7B file), DEADLINE_S (default 400: no new step after it), JOBS.
set -u
DEV=${DEV:-build-h7dev}
LLAMA=${LLAMA:-1}
Q7B=${Q7B:-1}
DEADLINE_S=${DEADLINE_S:-400}
JOBS=${JOBS:-8}
NAME=${NAME:-f_cuda}
O=${OUT:-/tmp/out}/$NAME
W=/tmp/cuda_decode_work # side logs (not copied back)
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
cap() { local l; l=$(left); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; } # timeout for a step

NVCC_BIN=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC_BIN")")}
export PATH="$CUDA_HOME/bin:$PATH"
stamp "machine (CUDA_HOME=$CUDA_HOME)"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
nproc

# llama.cpp (background: about 4.5 minutes with -j12)
LBIN="$DEV/llama-build/bin"
if [ "$LLAMA" = 1 ] && [ ! -x "$LBIN/llama-batched-bench" ]; then
    stamp "llama.cpp configure + build llama-bench llama-batched-bench (background, -j12)"
    (cmake -S "$DEV/llama.cpp" -B "$DEV/llama-build" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DLLAMA_BUILD_APP=OFF -DBUILD_SHARED_LIBS=OFF &&
     cmake --build "$DEV/llama-build" --target llama-bench llama-batched-bench -j 12
     echo "llama.cpp build rc $?") > "$W/llama_build.log" 2>&1 &
    llama_pid=$!
fi

# model files (background), the 7B one timed
M4="$DEV/llama-3.2-1b-q4_k_m.gguf"
M8="$DEV/llama-3.2-1b-q8_0.gguf"
M7="$DEV/qwen2.5-7b-q4_k_m.gguf"
gen() { # shape type file
    [ -f "$3" ] && return 0
    local s; s=$(date +%s)
    python3 tools/random_model --shape "$1" --type "$2" --vocab "$DEV/ggml-vocab-llama-bpe.gguf" \
        -o "$3" 2>&1 | tr '\r' '\n' | tail -1
    echo "random_model $1 $2: $(( $(date +%s) - s )) s"
}
(gen llama-3.2-1b q4_k_m "$M4"; gen llama-3.2-1b q8_0 "$M8") > "$W/models.log" 2>&1 &
models_pid=$!
if [ "$Q7B" = 1 ]; then
    gen qwen2.5-7b q4_k_m "$M7" > "$W/model7.log" 2>&1 &
    m7_pid=$!
fi
# the golden fixtures test_cuda compares against (tests/fixtures/golden -> GGUF)
FIX=(llama llama3 qwen2 qwen3)
FIXT=()
for m in "${FIX[@]}"; do for t in f32 f16 q8_0; do FIXT+=("build-fix/fixtures/$m-$t.gguf"); done; done
(make -j4 BUILD=build-fix PYTHON=python3 "${FIXT[@]}" > "$W/fixtures.log" 2>&1;
 echo "fixtures rc $?" >> "$W/fixtures.log") &
fix_pid=$!

# ours (one SASS target: the PTX one would double nvcc's time)
MK=(make -k -j"$JOBS" CUDA=1 CUDA_HOME="$CUDA_HOME" BUILD=build-cuda BLAS_SHIM=1
    NVCCFLAGS="-O3 -std=c++17 -I. -lineinfo --expt-relaxed-constexpr -gencode arch=compute_90a,code=sm_90a -Xcompiler -Wall,-Wextra"
    EXTRA_CFLAGS="-Itools/bench_only -I$DEV/pcre2/include"
    DEV_LIBS="$DEV/pcre2/lib/libpcre2-8.a -lm -pthread")
TARGETS=(build-cuda/test_cuda build-cuda/bench_engine_dev build-cuda/bench_dev)
stamp "build ${TARGETS[*]}"
timeout 260 "${MK[@]}" "${TARGETS[@]}" > "$W/build.log" 2>&1
echo "build rc $?"
grep -E "error|warning" "$W/build.log" | grep -v "missing initializer" | head -30

wait "$fix_pid"
tail -1 "$W/fixtures.log"
if [ -x build-cuda/test_cuda ] && [ "$(left)" -gt 150 ]; then
    stamp "test_cuda (OMNI_DEV_BACKEND=cuda): model_dev + engine_dev"
    OMNI_DEV_BACKEND=cuda OMNI_GOLDEN_DIR=build-fix/fixtures timeout "$(cap 90)" \
        build-cuda/test_cuda > "$W/test_cuda.txt" 2>&1
    echo "test_cuda rc $?"
    grep -E "FAIL|top-5|passed|skip" "$W/test_cuda.txt" | head -40
    grep -E "passed" "$W/test_cuda.txt" | tail -1 | sed 's/^/test_cuda: /' >> "$SUM"
fi
# /metrics' GPU lines: NVML through dlopen (src/core/gpu_info.c), read once
cat > "$W/gi.c" <<'C'
#include "src/core/gpu_info.h"
#include <stdio.h>
int main(void)
{
    struct gpu_info g = { 0, 0, 0 };
    const int rc = gpu_info_read(0, &g);
    printf("gpu_info_read(0): rc %d, %llu of %llu MiB used, %u%% busy\n", rc, g.mem_used >> 20,
           g.mem_total >> 20, g.util_pct);
    return rc != 0;
}
C
cc -std=gnu11 -I. -o "$W/gi" "$W/gi.c" src/core/gpu_info.c -pthread -ldl && "$W/gi" | tee -a "$SUM"

stamp "waiting for the 1B files"
wait "$models_pid"
cat "$W/models.log"
bd() { # label env... -- args
    local label=$1; shift
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" timeout "$(cap 60)" build-cuda/bench_dev "$@" 2> "$W/bd.err" |
        sed "s/^{/{\"label\":\"$label\",/" | tee -a "$RES"
    tail -2 "$W/bd.err" | grep -v "^bench_dev: .* on " || true
}
if [ -x build-cuda/bench_dev ]; then
    for M in "$M4" "$M8"; do
        [ "$(left)" -lt 60 ] && break
        b=$(basename "$M" .gguf)
        stamp "bench_dev $b: fused (default), then plain ops + one-warp attention, interleaved"
        bd "$b fused" X=1 -- -m "$M" -p 512 -n 128 -r 3
        bd "$b plain" OMNI_DEV_FUSE=0 OMNI_CUDA_ATT_SPLIT=0 -- -m "$M" -p 512 -n 128 -r 3
        bd "$b fused depth128" X=1 -- -m "$M" -p 1 -n 64 -d 128 -r 3
        bd "$b plain depth128" OMNI_DEV_FUSE=0 OMNI_CUDA_ATT_SPLIT=0 -- -m "$M" -p 1 -n 64 -d 128 -r 3
        bd "$b fused mvsplit" OMNI_CUDA_MV_SPLIT=1 -- -m "$M" -p 1 -n 128 -r 3
    done
    if [ "$(left)" -gt 150 ]; then
        stamp "decode at depth 1024: split attention against one warp per head"
        bd "llama-3.2-1b-q4_k_m fused depth1024" X=1 -- -m "$M4" -p 1 -n 64 -d 1024 -r 3
        bd "llama-3.2-1b-q4_k_m fused attsplit0 depth1024" OMNI_CUDA_ATT_SPLIT=0 -- -m "$M4" -p 1 -n 64 -d 1024 -r 3
    fi
    if [ "$(left)" -gt 120 ]; then
        stamp "per-op profile of 64 decode steps (OMNI_DEV_PROFILE=1, graphs off)"
        OMNI_DEV_PROFILE=1 timeout "$(cap 30)" build-cuda/bench_dev -m "$M4" -p 1 -n 64 -d 128 -r 1 2>&1 |
            grep profile
    fi
fi
if [ -x build-cuda/bench_engine_dev ] && [ "$(left)" -gt 80 ]; then
    stamp "bench-engine --device cuda --concurrency 1,16,64 (prompt 128, generate 64)"
    timeout "$(cap 90)" build-cuda/bench_engine_dev -m "$M4" --device cuda --concurrency 1,16,64 \
        --prompt-tokens 128 --gen-tokens 64 --json 2> "$W/engine.err" |
        sed 's/^{/{"label":"engine cuda",/' | tee -a "$RES"
    tail -3 "$W/engine.err"
fi

if [ -x build-cuda/bench_engine_dev ] && [ "$(left)" -gt 110 ]; then
    stamp "the same with the plain ops and one-warp attention, 1 and 16"
    OMNI_DEV_FUSE=0 OMNI_CUDA_ATT_SPLIT=0 timeout "$(cap 40)" build-cuda/bench_engine_dev -m "$M4" \
        --device cuda --concurrency 1,16 --prompt-tokens 128 --gen-tokens 64 --json 2>/dev/null |
        sed 's/^{/{"label":"engine cuda plain",/' | tee -a "$RES"
fi

# the 7B shape (its file takes a while to write)
if [ "$Q7B" = 1 ]; then
    stamp "waiting for the 7B file"
    while kill -0 "$m7_pid" 2>/dev/null && [ "$(left)" -gt 100 ]; do sleep 2; done
    cat "$W/model7.log"
    if [ -f "$M7" ] && [ -x build-cuda/bench_dev ] && [ "$(left)" -gt 100 ]; then
        stamp "bench_dev qwen2.5-7b q4_k_m"
        bd "qwen2.5-7b-q4_k_m fused" X=1 -- -m "$M7" -p 512 -n 128 -r 3
        bd "qwen2.5-7b-q4_k_m plain" OMNI_DEV_FUSE=0 OMNI_CUDA_ATT_SPLIT=0 -- -m "$M7" -p 1 -n 128 -r 3
        bd "qwen2.5-7b-q4_k_m fused mvsplit" OMNI_CUDA_MV_SPLIT=1 -- -m "$M7" -p 1 -n 128 -r 3
    fi
fi

if [ -x build-cuda/test_cuda ] && [ "${SAN:-1}" = 1 ] && [ "$(left)" -gt 120 ]; then
    stamp "compute-sanitizer memcheck (short: backend_matmul_types, qwen2 q8_0)"
    for f in backend_matmul model_dev_qwen2_q8; do
        OMNI_DEV_BACKEND=cuda OMNI_GOLDEN_DIR=build-fix/fixtures timeout "$(cap 45)" \
            compute-sanitizer --tool memcheck --error-exitcode 9 build-cuda/test_cuda $f \
            > "$W/san_$f.txt" 2>&1
        r="sanitizer $f rc $?: $(grep -E 'ERROR SUMMARY|passed' "$W/san_$f.txt" | tr '\n' ' ')"
        echo "$r"
        echo "$r" >> "$SUM"
    done
fi

if [ -x build-cuda/bench_engine_dev ] && [ "$(left)" -gt 140 ]; then
    stamp "16 sequences on the F16 GEMM instead of the int8 matvec (OMNI_CUDA_INT8_ROWS=8)"
    OMNI_CUDA_INT8_ROWS=8 timeout "$(cap 30)" build-cuda/bench_engine_dev -m "$M4" \
        --device cuda --concurrency 16 --prompt-tokens 128 --gen-tokens 64 --json 2>/dev/null |
        sed 's/^{/{"label":"engine cuda int8rows8",/' | tee -a "$RES"
fi

# llama.cpp on the same files
LB="$LBIN/llama-bench"
LBB="$LBIN/llama-batched-bench"
if [ "$LLAMA" = 1 ] && [ -n "${llama_pid:-}" ]; then
    stamp "waiting for llama.cpp (until $((DEADLINE_S - 60)) s)"
    while kill -0 "$llama_pid" 2>/dev/null && [ "$(left)" -gt 60 ]; do sleep 3; done
    kill -0 "$llama_pid" 2>/dev/null && kill "$llama_pid"
    tail -2 "$W/llama_build.log"
fi
lb() { # file
    timeout "$(cap 60)" "$LB" -m "$1" -p 512 -n 128 -r 3 -ngl 99 -o jsonl 2> "$W/lb.err" |
        sed 's/^{/{"label":"llama-bench",/' | tee -a "$RES" |
        grep -o '"n_prompt": [0-9]*, "n_gen": [0-9]*\|"avg_ts": [0-9.e+]*' | tr '\n' ' '
    echo
}
if [ -x "$LB" ]; then
    for M in "$M4" "$M8"; do
        [ "$(left)" -lt 20 ] && break
        stamp "llama-bench $(basename "$M")"
        lb "$M"
    done
fi
if [ -x "$LB" ] && [ -f "$M7" ] && [ "$(left)" -gt 30 ]; then
    stamp "llama-bench qwen2.5-7b q4_k_m"
    lb "$M7"
fi
if [ -x "$LBB" ] && [ "$(left)" -gt 25 ]; then
    stamp "llama-batched-bench -npp 128 -ntg 64 -npl 1,16,64"
    timeout "$(cap 40)" "$LBB" -m "$M4" -c 16384 -b 2048 -ub 512 -npp 128 -ntg 64 -npl 1,16,64 \
        -ngl 99 > "$W/llama_batched.txt" 2>&1
    grep -E "^\|" "$W/llama_batched.txt"
    awk -F'|' '/^\|/ && $2+0 > 0 { printf "llama-batched-bench: B %d S_TG %s t/s\n", $4, $9 }' \
        "$W/llama_batched.txt" >> "$SUM"
fi

stamp "done"
for p in ${llama_pid:-} ${m7_pid:-}; do kill "$p" 2>/dev/null; done
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
    elif lab.startswith("engine cuda"):
        print("%s concurrency %d: %.1f tok/s (decode step %.3f ms)"
              % (lab, r["concurrency"], r["aggregate_tok_s"], r.get("decode_step_ms", 0)))
    elif "test" in r:
        extra = " (%.0f GB/s of weights)" % r["weights_gb_s"] if "weights_gb_s" in r else ""
        print("bench_dev %s %s: %.1f tok/s%s" % (lab, r["test"], r["tok_s"], extra))
PY
echo "---- summary"
cat "$SUM"
