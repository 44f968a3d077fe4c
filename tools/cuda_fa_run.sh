#!/bin/bash
# cuda_fa_run.sh - one GPU job for the attention kernels of flash_attn.cu
# (docs/gpu.md "Prompt attention", "Decode over long contexts"): test_cuda's
# attention tests with the kernels and without (OMNI_CUDA_FA=0,
# OMNI_CUDA_FD=0), the whole test_cuda, compute-sanitizer (memcheck and
# racecheck) on them, bench_dev --check on a real-shape file (a 100-token
# prompt against the CPU), bench_dev pp at growing prompt lengths and tg64
# at growing depths with each variant, interleaved (A B A B); RUN_LLAMA=1:
# llama.cpp's llama-bench (CUDA, flash attention on) on the same files and
# lengths, built in the job from $DEV/llama_src.tgz while the tests run.
# Run from the repository root on the GPU machine with the carried dir
# (PREBUILT bins.tar.xz: test_cuda, bench_dev; pcre2/; the vocabulary):
#   OUT=/tmp/o NAME=f_fa1 DEV=build-cucar PREBUILT=build-cucar/bins.tar.xz bash tools/cuda_fa_run.sh
# Variables: PP_M4 (prompt lengths on the 1B Q4_K_M file, default "512 2048
# 8192 16384"), PP_M7 (7B, default "512 4096 8192"), PP_M15 (Qwen2.5-1.5B,
# default "4096"), ROUNDS (default 2), ENVS (the variants timed, default
# "X=1 OMNI_CUDA_FA=0"), TG_M4 / TG_M7 (depths of tg64, default "0 4096
# 16384" / "0 4096 16384"), TG_ENVS (default "X=1 OMNI_CUDA_FD=0"),
# DEADLINE_S (default 280), TEST_FILTER (default all), LLAMA_FILES (default
# "M4 M7"; M5: Llama-3.2-1B Q5_K_M, written when listed here or with TG5=1),
# TG5=1 (pp512 / tg128 of the Q5_K_M file), ENGINE_LONG=1 (bench_engine_dev
# --concurrency 1,16 --prompt-tokens 4096 --gen-tokens 64 on the 1B file per
# ENGINE_ENVS, default "X=1 OMNI_CUDA_FA=0,OMNI_CUDA_FD=0"), ENGINE_SHORT=1
# (bench_engine_dev --concurrency 1,16,64 --prompt-tokens 128 --gen-tokens
# 64 on the 1B file per SHORT_ENVS, ROUNDS times interleaved), TG_N (the
# tokens of the tg runs, default 64).
set -u
DEV=${DEV:-build-cucar}
NAME=${NAME:-f_fa}
DEADLINE_S=${DEADLINE_S:-280}
ENVS=${ENVS:-X=1 OMNI_CUDA_FA=0}
TG_ENVS=${TG_ENVS:-X=1 OMNI_CUDA_FD=0}
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
M5="$DEV/llama-3.2-1b-q5_k_m.gguf"
gen() { # shape type file
    [ -f "$3" ] || python3 tools/random_model --shape "$1" --type "$2" \
        --vocab "$DEV/ggml-vocab-llama-bpe.gguf" -o "$3" > /dev/null 2>&1
}
(gen llama-3.2-1b q4_k_m "$M4"; gen qwen2.5-1.5b q4_k_m "$M15"; gen qwen2.5-7b q4_k_m "$M7"
 case " ${LLAMA_FILES:-} ${TG5:-} " in *" M5 "*|*" 1 "*) gen llama-3.2-1b q5_k_m "$M5" ;; esac) &
models_pid=$!
FIXT=()
for m in llama llama3 qwen2 qwen3; do for t in f32 f16 q8_0; do FIXT+=("build-ffix/fixtures/$m-$t.gguf"); done; done
(make -j3 BUILD=build-ffix PYTHON=python3 "${FIXT[@]}" > "$W/fixtures.log" 2>&1) &
fix_pid=$!
LB="$DEV/llama-build/bin"
if [ "${RUN_LLAMA:-0}" = 1 ] && [ ! -x "$LB/llama-bench" ]; then
    (tar xzf "$DEV/llama_src.tgz" -C "$DEV" &&
     cmake -S "$DEV/llama.cpp" -B "$DEV/llama-build" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90a -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DBUILD_SHARED_LIBS=OFF &&
     cmake --build "$DEV/llama-build" --target llama-bench -j "${LLAMA_JOBS:-16}"
     echo "llama.cpp build rc $?") > "$W/llama_build.log" 2>&1 &
    llama_pid=$!
fi
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
for t in backend_prompt_attention backend_long_decode_attention backend_wide_decode_attention; do
    tc "$t" X=1 -- $t
    tc "$t, FA=0 FD=0" OMNI_CUDA_FA=0 OMNI_CUDA_FD=0 -- $t
    tc "$t, FD=1" OMNI_CUDA_FD=1 -- $t
    for tool in memcheck racecheck; do
        OMNI_DEV_BACKEND=cuda timeout "$(cap 60)" compute-sanitizer --tool $tool --error-exitcode 9 \
            build-fcuda/test_cuda $t > "$W/san.txt" 2>&1
        say "$tool $t rc $?: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$W/san.txt" | tr '\n' ' ')"
    done
done
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
tg() { # file depth
    for r in $(seq "${ROUNDS:-2}"); do
        for ev in $TG_ENVS; do
            [ "$(left)" -gt 20 ] || return 0
            local line
            line=$(env ${ev//,/ } timeout "$(cap 60)" build-fcuda/bench_dev -m "$1" -p 1 -n "${TG_N:-64}" -d "$2" -r 2 \
                2>/dev/null | grep '"tg')
            say "tg${TG_N:-64} d$2 $(basename "$1" .gguf) $ev round $r: $line"
        done
    done
}
for d in ${TG_M4-0 4096 16384}; do tg "$M4" "$d"; done
for d in ${TG_M7-0 4096 16384}; do tg "$M7" "$d"; done
for p in ${PP_M4-512 2048 8192 16384}; do bd "$M4" "$p"; done
for p in ${PP_M15-4096}; do bd "$M15" "$p"; done
for p in ${PP_M7-512 4096 8192}; do bd "$M7" "$p"; done
if [ "${TG5:-0}" = 1 ] && [ -f "$M5" ]; then
    for r in 1 2; do
        say "$(basename "$M5" .gguf) round $r: $(timeout "$(cap 60)" build-fcuda/bench_dev -m "$M5" -p 512 -n 128 -r 3 \
            2>/dev/null | grep test | tr '\n' ' ')"
    done
fi
if [ "${ENGINE_LONG:-0}" = 1 ] && [ -x build-fcuda/bench_engine_dev ]; then
    for ev in ${ENGINE_ENVS:-X=1 OMNI_CUDA_FA=0,OMNI_CUDA_FD=0}; do
        [ "$(left)" -gt 60 ] || break
        env ${ev//,/ } timeout "$(cap 120)" build-fcuda/bench_engine_dev -m "$M4" --device cuda \
            --concurrency 1,16 --prompt-tokens 4096 --gen-tokens 64 > "$W/engine.txt" 2>&1
        say "engine 4096+64 $ev rc $?:"
        tail -4 "$W/engine.txt" | tee -a "$SUM"
    done
fi
if [ "${ENGINE_SHORT:-0}" = 1 ]; then
    for r in $(seq "${ROUNDS:-2}"); do
        for ev in ${SHORT_ENVS:-X=1}; do
            [ "$(left)" -gt 40 ] || break
            env ${ev//,/ } timeout "$(cap 90)" build-fcuda/bench_engine_dev -m "$M4" --device cuda \
                --concurrency 1,16,64 --prompt-tokens 128 --gen-tokens 64 > "$W/engine.txt" 2>&1
            say "engine 128+64 $ev round $r rc $?: $(grep -E '^ *(1|16|64) ' "$W/engine.txt" | awk '{printf "%s: %s tok/s, step %s ms, decode %s ms; ", $1, $2, $9, $10}')"
            tail -5 "$W/engine.txt" >> "$O/engine_short.txt"
        done
    done
fi
if [ "${RUN_LLAMA:-0}" = 1 ]; then
    [ -n "${llama_pid:-}" ] && wait "$llama_pid"
    say "llama.cpp: $(tail -1 "$W/llama_build.log" 2>/dev/null) at $(el) s"
    for mv in ${LLAMA_FILES:-M4 M7}; do
        M=${!mv}
        [ "$(left)" -gt 30 ] && [ -x "$LB/llama-bench" ] && [ -f "$M" ] || break
        timeout "$(cap 120)" "$LB/llama-bench" -m "$M" -fa 1 -p "${LLAMA_PP:-512,4096,16384}" -n 0 -r 2 \
            -o jsonl 2>/dev/null | python3 -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l)
    print("llama.cpp pp%d fa on %s: %.1f tok/s" % (r["n_prompt"], r["model_filename"].split("/")[-1], r["avg_ts"]))' |
            tee -a "$SUM"
        timeout "$(cap 120)" "$LB/llama-bench" -m "$M" -fa 1 -p 0 -n 64 -d "${LLAMA_DEPTHS:-0,4096,16384}" -r 2 \
            -o jsonl 2>/dev/null | python3 -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l)
    print("llama.cpp tg%d d%d fa on %s: %.1f tok/s" % (r["n_gen"], r["n_depth"], r["model_filename"].split("/")[-1], r["avg_ts"]))' |
            tee -a "$SUM"
    done
fi
say "done at $(el) s"
