#!/bin/bash
# cuda_engine_run.sh - the engine on the GPU in one call (issue 19,
# docs/gpu.md "Serving"): build test_cuda and bench_engine_dev (no server
# libraries) with CUDA, run the device tests (tests/test_model_dev.c and
# tests/test_engine_dev.c on the cuda backend), then bench-engine --device
# cuda --concurrency 1,16,64 on a random Llama-3.2-1B Q4_K_M file written
# there by tools/random_model, and (LLAMA=1) llama.cpp's llama-batched-bench
# on the same file at 1, 16 and 64 sequences, built in the background.
#
# Run from the repository root with the ignored folder $DEV (default
# build-h7dev, see tools/cuda_device_run.sh for what it holds) carried:
#   run(command="tools/cuda_engine_run.sh", carry=["build-h7dev"])
# Everything lands in $OUT/f_cuda/ (log.txt has every number); the last
# lines print a summary. Variables: LLAMA=0 skips llama.cpp; DEADLINE_S
# (default 380) is when the script stops starting work; JOBS (16).
set -u
DEV=${DEV:-build-h7dev}
LLAMA=${LLAMA:-1}
DEADLINE_S=${DEADLINE_S:-380}
JOBS=${JOBS:-16}
O=${OUT:-/tmp/out}/f_cuda
mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
stamp() { echo "== $(el) s: $*"; }
left() { echo $(( DEADLINE_S - $(el) )); }

NVCC_BIN=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC_BIN")")}
export PATH="$CUDA_HOME/bin:$PATH"
stamp "machine (CUDA_HOME=$CUDA_HOME, git: $(cat .git/HEAD 2>/dev/null | head -c 12))"
{ nvidia-smi; nvcc --version; nproc; free -g; } > "$O/machine.txt" 2>&1
grep -E "H100|H200|Driver|release" "$O/machine.txt" | head -4

# llama.cpp's llama-batched-bench, in the background (a warm machine keeps it)
LBB="$DEV/llama-build/bin/llama-batched-bench"
if [ "$LLAMA" = 1 ] && [ ! -x "$LBB" ]; then
    stamp "llama.cpp configure + build llama-batched-bench (background, -j12)"
    (cmake -S "$DEV/llama.cpp" -B "$DEV/llama-build" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DLLAMA_BUILD_APP=OFF -DBUILD_SHARED_LIBS=OFF &&
     cmake --build "$DEV/llama-build" --target llama-batched-bench -j 12
     echo "llama.cpp build rc $?") > "$O/llama_build.log" 2>&1 &
    llama_pid=$!
fi

# the model file
M="$DEV/llama-3.2-1b-q4_k_m.gguf"
( [ -f "$M" ] || python3 tools/random_model --shape llama-3.2-1b --type q4_k_m \
      --vocab "$DEV/ggml-vocab-llama-bpe.gguf" -o "$M" 2>&1 | tr '\r' '\n' | tail -2 ) \
    > "$O/model.log" 2>&1 &
model_pid=$!

# ours: the batched matvec first; if nvcc refuses it, the build without it
# (OMNI_CUDA_NO_F16_CACHE: no F16 weight copies, as before) so the rest still runs
MK=(make -k -j"$JOBS" CUDA=1 CUDA_HOME="$CUDA_HOME" BUILD=build-cuda BLAS_SHIM=1
    EXTRA_CFLAGS="-Itools/bench_only -I$DEV/pcre2/include"
    DEV_LIBS="$DEV/pcre2/lib/libpcre2-8.a -lm -pthread")
TARGETS=(build-cuda/test_cuda build-cuda/bench_engine_dev build-cuda/bench_dev)
stamp "build ${TARGETS[*]}"
timeout 240 "${MK[@]}" "${TARGETS[@]}" > "$O/build.log" 2>&1
rc=$?
echo "build rc $rc"
grep -E "error|warning" "$O/build.log" | head -30
if [ $rc -ne 0 ] && [ "$(left)" -gt 200 ]; then
    stamp "rebuild with NVCC_EXTRA=-DOMNI_CUDA_NO_F16_CACHE"
    rm -f build-cuda/src/core/cuda/backend_cuda.o
    timeout 150 "${MK[@]}" NVCC_EXTRA=-DOMNI_CUDA_NO_F16_CACHE "${TARGETS[@]}" > "$O/build2.log" 2>&1
    echo "build (fallback) rc $?"
    grep -E "error|warning" "$O/build2.log" | head -20
fi

if [ -x build-cuda/test_cuda ] && [ "$(left)" -gt 120 ]; then
    stamp "test_cuda (OMNI_DEV_BACKEND=cuda): model_dev + engine_dev"
    OMNI_DEV_BACKEND=cuda OMNI_GOLDEN_DIR="$DEV/fixtures" timeout 100 build-cuda/test_cuda \
        > "$O/test_cuda.txt" 2>&1
    echo "test_cuda rc $?"
    grep -E "FAIL|tests/|passed" "$O/test_cuda.txt" | head -40
fi

stamp "waiting for the model file"
wait "$model_pid"
cat "$O/model.log"
SUMMARY="$O/summary.txt"
: > "$SUMMARY"
if [ -x build-cuda/bench_engine_dev ] && [ -f "$M" ] && [ "$(left)" -gt 50 ]; then
    stamp "bench-engine --device cuda --concurrency 1,16,64 (prompt 128, generate 64)"
    timeout $(( $(left) > 100 ? 100 : $(left) - 10 )) build-cuda/bench_engine_dev -m "$M" --device cuda --concurrency 1,16,64 \
        --prompt-tokens 128 --gen-tokens 64 --json > "$O/engine_cuda.jsonl" 2> "$O/engine_cuda.err"
    echo "rc $?"
    cat "$O/engine_cuda.jsonl"
    tail -5 "$O/engine_cuda.err"
    python3 - "$O/engine_cuda.jsonl" >> "$SUMMARY" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
agg = {r["concurrency"]: r["aggregate_tok_s"] for r in rows}
for c in sorted(agg):
    print("omniserve bench-engine --device cuda: concurrency %d aggregate %.1f tok/s (%.2fx of 1)"
          % (c, agg[c], agg[c] / agg[1] if agg.get(1) else 0))
PY
fi
if [ -x build-cuda/bench_engine_dev ] && [ -f "$M" ] && [ "$(left)" -gt 90 ]; then
    stamp "the same without graphs (OMNI_DEV_GRAPHS=0), 1 and 16"
    OMNI_DEV_GRAPHS=0 timeout 40 build-cuda/bench_engine_dev -m "$M" --device cuda \
        --concurrency 1,16 --prompt-tokens 128 --gen-tokens 64 --json 2>/dev/null |
        tee "$O/engine_cuda_nographs.jsonl"
fi

if [ -x build-cuda/bench_dev ] && [ -f "$M" ] && [ "$(left)" -gt 90 ]; then
    stamp "bench_dev pp512 / tg128 (the forward alone; prompts now on the F16 copies)"
    timeout 40 build-cuda/bench_dev -m "$M" -p 512 -n 128 -r 3 2>&1 | tee "$O/bench_dev.jsonl" |
        tail -4
fi

if [ "$LLAMA" = 1 ]; then
    if [ -n "${llama_pid:-}" ]; then
        stamp "waiting for llama.cpp (until $DEADLINE_S s)"
        while kill -0 "$llama_pid" 2>/dev/null && [ "$(left)" -gt 40 ]; do sleep 3; done
        tail -3 "$O/llama_build.log"
    fi
    if [ -x "$LBB" ] && [ -f "$M" ] && [ "$(left)" -gt 35 ]; then
        stamp "llama-batched-bench -npp 128 -ntg 64 -npl 1,16,64"
        timeout 35 "$LBB" -m "$M" -c 16384 -b 2048 -ub 512 -npp 128 -ntg 64 -npl 1,16,64 \
            -ngl 99 > "$O/llama_batched.txt" 2>&1
        echo "rc $?"
        grep -E "^\|" "$O/llama_batched.txt"
        awk -F'|' '/^\|/ && $2+0 > 0 { printf "llama-batched-bench: B %d S_TG %s t/s\n", $4, $9 }' \
            "$O/llama_batched.txt" >> "$SUMMARY"
    else
        [ -n "${llama_pid:-}" ] && kill "$llama_pid" 2>/dev/null
        echo "llama-batched-bench not built (or no time left): $(tail -2 "$O/llama_build.log" 2>/dev/null | tr '\n' ' ')"
    fi
fi
stamp "done"
echo "---- summary"
grep -E "passed|FAIL" "$O/test_cuda.txt" 2>/dev/null | tail -3
cat "$SUMMARY"
