#!/bin/bash
# cuda_fa_run.sh - one GPU job for the prompt attention (docs/gpu.md "Prompt
# attention"): test_cuda's backend_prompt_attention with the FlashAttention
# kernel and without (OMNI_CUDA_FA=0), the whole test_cuda, compute-sanitizer
# on the attention test, bench_dev --check on a real-shape file (a 100-token
# prompt against the CPU), then bench_dev pp at growing prompt lengths with
# the kernel and without, interleaved (A B A B).
# Run from the repository root on the GPU machine with the carried dir
# (PREBUILT bins.tar.xz: test_cuda, bench_dev; pcre2/; the vocabulary):
#   OUT=/tmp/o NAME=f_fa1 DEV=build-cucar PREBUILT=build-cucar/bins.tar.xz bash tools/cuda_fa_run.sh
# Variables: PP_M4 (prompt lengths on the 1B Q4_K_M file, default "512 2048
# 8192 16384"), PP_M7 (7B, default "512 4096 8192"), PP_M15 (Qwen2.5-1.5B,
# default "4096"), ROUNDS (default 2), ENVS (the variants timed, default
# "X=1 OMNI_CUDA_FA=0"), DEADLINE_S (default 280), TEST_FILTER (default all).
set -u
DEV=${DEV:-build-cucar}
NAME=${NAME:-f_fa}
DEADLINE_S=${DEADLINE_S:-280}
ENVS=${ENVS:-X=1 OMNI_CUDA_FA=0}
O=${OUT:-/tmp/out}/$NAME
W=/tmp/cuda_fa_work
mkdir -p "$O" "$W"
exec > >(tee -a "$O/log.txt") 2>&1
SUM="$O/summary.txt"
: > "$SUM"
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
left() { echo $(( DEADLINE_S - $(el) )); }
cap() { local l; l=$(left); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
say() { echo "$*" | tee -a "$SUM"; }
export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"
say "$NAME: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), load $(cut -d' ' -f1-3 /proc/loadavg)"

M4="$DEV/llama-3.2-1b-q4_k_m.gguf"
M7="$DEV/qwen2.5-7b-q4_k_m.gguf"
M15="$DEV/qwen2.5-1.5b-q4_k_m.gguf"
gen() { # shape type file
    [ -f "$3" ] || python3 tools/random_model --shape "$1" --type "$2" \
        --vocab "$DEV/ggml-vocab-llama-bpe.gguf" -o "$3" > /dev/null 2>&1
}
(gen llama-3.2-1b q4_k_m "$M4"; gen qwen2.5-1.5b q4_k_m "$M15"; gen qwen2.5-7b q4_k_m "$M7") &
models_pid=$!
FIXT=()
for m in llama llama3 qwen2 qwen3; do for t in f32 f16 q8_0; do FIXT+=("build-ffix/fixtures/$m-$t.gguf"); done; done
(make -j3 BUILD=build-ffix PYTHON=python3 "${FIXT[@]}" > "$W/fixtures.log" 2>&1) &
fix_pid=$!
mkdir -p build-fcuda && tar xJf "${PREBUILT:-$DEV/bins.tar.xz}" -C build-fcuda
for t in test_cuda bench_dev; do
    ldd "build-fcuda/$t" | grep "not found" && say "build-fcuda/$t: missing libraries"
done

tc() { # label env... -- test_cuda args
    local label=$1; shift
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" OMNI_DEV_BACKEND=cuda OMNI_GOLDEN_DIR=build-ffix/fixtures \
        timeout "$(cap 120)" build-fcuda/test_cuda "$@" > "$W/tc.txt" 2>&1
    say "test_cuda $label rc $?: $(grep -E 'passed' "$W/tc.txt" | tail -1)"
    grep -E "FAIL|fail|diff" "$W/tc.txt" | head -8 | tee -a "$SUM"
}
tc "prompt attention" X=1 -- backend_prompt_attention
tc "prompt attention, FA=0" OMNI_CUDA_FA=0 -- backend_prompt_attention
OMNI_DEV_BACKEND=cuda timeout "$(cap 60)" compute-sanitizer --tool memcheck --error-exitcode 9 \
    build-fcuda/test_cuda backend_prompt_attention > "$W/san.txt" 2>&1
say "sanitizer backend_prompt_attention rc $?: $(grep -E 'ERROR SUMMARY' "$W/san.txt")"
OMNI_DEV_BACKEND=cuda timeout "$(cap 60)" compute-sanitizer --tool racecheck --error-exitcode 9 \
    build-fcuda/test_cuda backend_prompt_attention > "$W/race.txt" 2>&1
say "racecheck backend_prompt_attention rc $?: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$W/race.txt")"
wait "$fix_pid"
tc "all" X=1 -- ${TEST_FILTER:-}
wait "$models_pid"
ls -la "$DEV"/*.gguf | tee -a "$SUM"
for ev in $ENVS; do
    env ${ev//,/ } timeout "$(cap 90)" build-fcuda/bench_dev -m "$M4" -p 1 -n 1 -r 1 --check 100 \
        > "$W/check.txt" 2>&1
    say "check 100 $ev rc $?: $(grep -iE 'diff|agree|greedy' "$W/check.txt" | tr '\n' ' ' | cut -c1-400)"
done
bd() { # file P
    for r in $(seq "${ROUNDS:-2}"); do
        for ev in $ENVS; do
            [ "$(left)" -gt 20 ] || return 0
            local line
            line=$(env ${ev//,/ } timeout "$(cap 60)" build-fcuda/bench_dev -m "$1" -p "$2" -n 1 -r 3 2>/dev/null |
                grep '"pp')
            say "pp$2 $(basename "$1" .gguf) $ev round $r: $line"
        done
    done
}
for p in ${PP_M4-512 2048 8192 16384}; do bd "$M4" "$p"; done
for p in ${PP_M15-4096}; do bd "$M15" "$p"; done
for p in ${PP_M7-512 4096 8192}; do bd "$M7" "$p"; done
say "done at $(el) s"
