#!/bin/bash
# cuda_device_run.sh - one batch of CUDA work on the GPU machine (issue 19,
# docs/gpu.md): build the CUDA backend and its test / bench binaries (no
# server libraries), run `make test-cuda`'s tests, compute-sanitizer on a
# short run, then pp/tg of the device forward beside llama.cpp's llama-bench
# (CUDA) on random Llama-3.2-1B Q4_K_M and Q8_0 files written there by
# tools/random_model. Everything lands in $OUT/h7/ (packed as $OUT/h7.tgz).
#
# Needs, in the ignored folder $DEV (default build-h7dev, carried):
#   llama.cpp/   llama.cpp's source (node-llama-cpp's bundle, /tmp/llama.cpp
#                here) without .git, docs, models and the other GPU backends
#   pcre2/{include/pcre2.h,lib/libpcre2-8.a}   Debian's pcre2, static
#   ggml-vocab-llama-bpe.gguf                  ../shared/vocab's file
#   fixtures/    the golden GGUFs (make golden-fixtures) and stories260K.gguf
# Variables: STEPS="build test san bench prof llama"
# picks steps; DEADLINE_S (default 540) stops starting new steps after it.
set -u
DEV=${DEV:-build-h7dev}
JOBS_LLAMA=${JOBS_LLAMA:-12}
STEPS=${STEPS:-build test san bench prof llama}
DEADLINE_S=${DEADLINE_S:-540}
O=${OUT:-/tmp/out}/h7
mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
stamp() { echo "== $(el) s: $*"; }
want() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }
late() { [ "$(el)" -ge "$DEADLINE_S" ]; }

NVCC_BIN=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC_BIN")")}
export PATH="$CUDA_HOME/bin:$PATH"
stamp "machine (CUDA_HOME=$CUDA_HOME)"
{ nvidia-smi; nvcc --version; nproc; free -g; cc --version | head -1; } > "$O/machine.txt" 2>&1
grep -E "H100|H200|Driver|release" "$O/machine.txt" | head -4

# llama.cpp in the background (built once; the folder survives on a warm machine)
LB="$DEV/llama-build/bin/llama-bench"
if want llama && [ ! -x "$LB" ]; then
    stamp "llama.cpp configure + build (background, -j$JOBS_LLAMA)"
    (cmake -S "$DEV/llama.cpp" -B "$DEV/llama-build" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DLLAMA_BUILD_APP=OFF -DBUILD_SHARED_LIBS=OFF &&
     cmake --build "$DEV/llama-build" --target llama-bench -j "$JOBS_LLAMA"
     echo "llama.cpp build rc $?") > "$O/llama_build.log" 2>&1 &
    llama_pid=$!
fi

# the two model files
M4="$DEV/llama-3.2-1b-q4_k_m.gguf"
M8="$DEV/llama-3.2-1b-q8_0.gguf"
if want bench; then
    (for t in q4_k_m q8_0; do
        f="$DEV/llama-3.2-1b-$t.gguf"
        [ -f "$f" ] || python3 tools/random_model --shape llama-3.2-1b --type $t \
            --vocab "$DEV/ggml-vocab-llama-bpe.gguf" -o "$f" 2>&1 | tr '\r' '\n' | tail -1
    done) > "$O/models.log" 2>&1 &
    models_pid=$!
fi

# ours
if want build; then
    stamp "build test_cuda + bench_dev"
    make -j4 CUDA=1 CUDA_HOME="$CUDA_HOME" BUILD=build-cuda BLAS_SHIM=1 \
        EXTRA_CFLAGS="-Itools/bench_only -I$DEV/pcre2/include" \
        DEV_LIBS="$DEV/pcre2/lib/libpcre2-8.a -lm -pthread" build-cuda/test_cuda build-cuda/bench_dev \
        > "$O/build.log" 2>&1
    echo "build rc $?"
    grep -E "error|warning" "$O/build.log" | head -40
fi

if want test && [ -x build-cuda/test_cuda ] && ! late; then
    stamp "test_cuda (OMNI_DEV_BACKEND=cuda)"
    OMNI_DEV_BACKEND=cuda OMNI_GOLDEN_DIR="$DEV/fixtures" timeout 180 build-cuda/test_cuda \
        > "$O/test_cuda.txt" 2>&1
    echo "test rc $?"
    grep -E "FAIL|tests/|top-5|passed" "$O/test_cuda.txt" | head -60
fi

if want san && [ -x build-cuda/test_cuda ] && ! late; then
    stamp "compute-sanitizer memcheck (short run)"
    for f in backend_matmul model_dev_qwen3_q8 model_dev_stories; do
        OMNI_DEV_BACKEND=cuda OMNI_GOLDEN_DIR="$DEV/fixtures" timeout 120 \
            compute-sanitizer --tool memcheck --error-exitcode 9 build-cuda/test_cuda $f \
            > "$O/sanitizer_$f.txt" 2>&1
        echo "sanitizer $f rc $?: $(grep -E 'ERROR SUMMARY|passed' "$O/sanitizer_$f.txt" | tr '\n' ' ')"
    done
fi

if want bench && [ -x build-cuda/bench_dev ]; then
    stamp "waiting for the model files"
    wait "$models_pid"
    cat "$O/models.log"
    for M in "$M4" "$M8"; do
        late && break
        stamp "bench_dev $M"
        timeout 120 build-cuda/bench_dev -m "$M" -p 512 -n 128 -r 3 --check 8 \
            > "$O/ours_$(basename "$M" .gguf).jsonl" 2> "$O/ours_$(basename "$M" .gguf).err"
        echo "rc $?"
        cat "$O/ours_$(basename "$M" .gguf).jsonl" "$O/ours_$(basename "$M" .gguf).err"
    done
fi

if want prof && [ -x build-cuda/bench_dev ] && ! late; then
    stamp "decode without graphs; with F32 activations"
    for v in "OMNI_DEV_GRAPHS=0" "OMNI_CUDA_ACT=f32"; do
        for M in "$M4" "$M8"; do
            env $v timeout 60 build-cuda/bench_dev -m "$M" -p 512 -n 128 -r 3 2>/dev/null |
                sed "s/^{/{\"env\":\"$v\",/"
        done
    done | tee "$O/ours_variants.jsonl"
    stamp "per-step profile (OMNI_DEV_PROFILE=1): prompt of 512, then 64 decode steps"
    OMNI_DEV_PROFILE=1 timeout 60 build-cuda/bench_dev -m "$M4" -p 512 -n 1 -r 1 2>&1 |
        grep profile | tee "$O/profile_pp512.txt"
    OMNI_DEV_PROFILE=1 timeout 60 build-cuda/bench_dev -m "$M4" -p 1 -n 64 -r 1 2>&1 |
        grep profile | tee "$O/profile_tg.txt"
fi

if want llama; then
    if [ -n "${llama_pid:-}" ]; then
        stamp "waiting for llama.cpp"
        while kill -0 "$llama_pid" 2>/dev/null && ! late; do sleep 5; done
        tail -3 "$O/llama_build.log"
    fi
    if [ -x "$LB" ] && [ -n "${models_pid:-}" ]; then
        wait "$models_pid" 2>/dev/null
        for M in "$M4" "$M8"; do
            [ "$(el)" -ge $((DEADLINE_S + 30)) ] && break
            stamp "llama-bench $M"
            timeout 90 "$LB" -m "$M" -p 512 -n 128 -r 3 -ngl 99 -o jsonl \
                > "$O/llama_$(basename "$M" .gguf).jsonl" 2> "$O/llama_$(basename "$M" .gguf).err"
            echo "rc $?"
            grep -o '"n_prompt": [0-9]*, "n_gen": [0-9]*\|"avg_ts": [0-9.e+]*' \
                "$O/llama_$(basename "$M" .gguf).jsonl" | tr '\n' ' '
            echo
        done
    else
        echo "llama-bench not built (yet): $(tail -2 "$O/llama_build.log" 2>/dev/null | tr '\n' ' ')"
    fi
fi
stamp "done"
tar czf "${OUT:-/tmp/out}/h7.tgz" -C "${OUT:-/tmp/out}" h7 && rm -rf "$O"
