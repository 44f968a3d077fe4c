#!/bin/bash
# whisper_dev_run.sh - Whisper on the GPU (issue 19 item 3, docs/gpu.md):
# one batch of work for the GPU machine. Builds test_whisper_dev and
# bench_whisper_dev with the CUDA backend and no server libraries (BLAS
# shim, no zlib/ffmpeg/lws: whisper_full.c is left out), converts the tiny
# HF golden fixture, runs tests/test_whisper_dev.c on "cuda", a short
# compute-sanitizer pass, then encoder + 32 greedy decode steps of random
# real-shape tiny.en / base.en files (tools/random_model) on the GPU beside
# the CPU forward on the same machine. Everything lands in $OUT/$JOB/.
#   JOB=g_whisper bash tools/whisper_dev_run.sh      (from the repo root)
# Variables: STEPS="build test san bench", DEADLINE_S (170): no new step after it.
set -u
JOB=${JOB:-g_whisper}
STEPS=${STEPS:-build test san bench}
DEADLINE_S=${DEADLINE_S:-170}
B=build-gw
O=${OUT:-/tmp/out}/$JOB
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
{ nvidia-smi; nvcc --version; nproc; free -g; } > "$O/machine.txt" 2>&1
grep -E "H100|H200|release" "$O/machine.txt" | head -3

# the random real-shape files, in the background
# random_model reads GPT-2's vocabulary from ../shared/vocab beside tools/: a
# copy of tools/ under /tmp/gwroot/x with the vocabulary (gw-vocab/, an
# untracked copy of ../shared/vocab's file) at /tmp/gwroot/shared/vocab
mkdir -p /tmp/gw /tmp/gwroot/x /tmp/gwroot/shared/vocab
if want bench; then
    cp -r tools /tmp/gwroot/x/ && cp gw-vocab/ggml-vocab-gpt-2.gguf /tmp/gwroot/shared/vocab/ 2>/dev/null
    (for s in whisper-tiny.en whisper-base.en; do
        [ -f /tmp/gw/$s.bin ] || python3 /tmp/gwroot/x/tools/random_model --shape $s --type f16 -o /tmp/gw/$s.bin 2>&1 | tail -1
    done) > "$O/models.log" 2>&1 &
    models_pid=$!
fi

SRCS="audio/whisper.c audio/whisper_forward.c audio/whisper_batch.c audio/whisper_dev.c \
$(ls src/core/*.c | grep -v download.c) $(ls src/core/arch/x86/*.c) tests/cuda/blas_shim.c"
OBJS=$(for f in $SRCS src/core/cuda/*.cu; do echo "$B/${f%.*}.o"; done)
LIBS="-lm -pthread -L$CUDA_HOME/lib64 -lcublas -lcudart -lstdc++ -ldl -lrt"
if want build; then
    stamp "build (objects: make CUDA=1, sm_90a only)"
    make -j16 CUDA=1 CUDA_HOME="$CUDA_HOME" BUILD=$B BLAS_SHIM=1 EXTRA_CFLAGS="-Itools/bench_only" \
        NVCCFLAGS="-O3 -std=c++17 -I. -lineinfo --expt-relaxed-constexpr -gencode arch=compute_90a,code=sm_90a -Xcompiler -Wall,-Wextra" \
        $OBJS $B/tests/test_main.o $B/tests/test_whisper_dev.o $B/tests/cuda/bench_whisper_dev.o > "$O/build.log" 2>&1
    echo "objects rc $?"
    cc -o $B/test_whisper_dev $B/tests/test_main.o $B/tests/test_whisper_dev.o $OBJS $LIBS >> "$O/build.log" 2>&1 &&
        cc -o $B/bench_whisper_dev $B/tests/cuda/bench_whisper_dev.o $OBJS $LIBS >> "$O/build.log" 2>&1
    echo "link rc $?"
    grep -E "error|warning" "$O/build.log" | head -30
fi

if want test && [ -x $B/test_whisper_dev ]; then
    stamp "golden fixtures + test_whisper_dev on cuda"
    mkdir -p $B/fixtures
    for t in f32 f16 q8_0; do
        python3 tools/hf_whisper_to_ggml.py tests/fixtures/whisper $B/fixtures/whisper-golden-$t.bin --type $t \
            > $B/fixtures/$t.log 2>&1 || tail -3 $B/fixtures/$t.log
    done
    OMNI_DEV_BACKEND=cuda OMNI_GOLDEN_DIR=$B/fixtures timeout 60 $B/test_whisper_dev > "$O/test_cuda.txt" 2>&1
    echo "test rc $?"
    cat "$O/test_cuda.txt" | tail -12
    OMNI_CUDA_DENSE_SPLIT=0 OMNI_DEV_BACKEND=cuda OMNI_GOLDEN_DIR=$B/fixtures timeout 60 $B/test_whisper_dev \
        > "$O/test_cuda_split.txt" 2>&1
    echo "test (OMNI_CUDA_DENSE_SPLIT=0) rc $? ($(tail -1 "$O/test_cuda_split.txt"))"
    OMNI_GOLDEN_DIR=$B/fixtures timeout 60 $B/test_whisper_dev > "$O/test_cpu.txt" 2>&1
    echo "cpu-backend test rc $? ($(tail -1 "$O/test_cpu.txt"))"
fi

if want san && [ -x $B/test_whisper_dev ] && ! late && [ "$(el)" -lt 110 ]; then
    stamp "compute-sanitizer memcheck"
    for f in whisper_dev_backend_ops whisper_dev_golden_f16; do
        OMNI_DEV_BACKEND=cuda OMNI_GOLDEN_DIR=$B/fixtures timeout 40 \
            compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_whisper_dev $f > "$O/sanitizer_$f.txt" 2>&1
        echo "sanitizer $f rc $?: $(grep -E 'ERROR SUMMARY|passed' "$O/sanitizer_$f.txt" | tr '\n' ' ')"
    done
fi

if want bench && [ -x $B/bench_whisper_dev ]; then
    stamp "waiting for the model files"
    wait "$models_pid"
    cat "$O/models.log"
    for s in whisper-tiny.en whisper-base.en; do
        late && break
        stamp "bench $s"
        timeout 60 $B/bench_whisper_dev -m /tmp/gw/$s.bin -n 32 -b 1,4 -r 3 --threads 16 >> "$O/bench.jsonl" 2>> "$O/bench.err"
        echo "rc $?"
        late && break
        timeout 40 $B/bench_whisper_dev -m /tmp/gw/$s.bin -n 32 -b 16,64 -r 3 --no-cpu >> "$O/bench.jsonl" 2>> "$O/bench.err"
        echo "rc $?"
        OMNI_CUDA_DENSE_SPLIT=0 timeout 40 $B/bench_whisper_dev -m /tmp/gw/$s.bin -n 32 -b 1,16,64 -r 3 --no-cpu \
            2>> "$O/bench.err" | sed 's/^{/{"env":"OMNI_CUDA_DENSE_SPLIT=0",/' >> "$O/bench.jsonl"
        echo "rc $?"
    done
    cat "$O/bench.jsonl" "$O/bench.err"
fi
stamp "done"
