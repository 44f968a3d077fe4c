#!/bin/bash
# device_intel_pass.sh - issue [9]'s whole table on the GPU machine's Intel CPU
# host (Sapphire Rapids class: AVX-512 VNNI/BF16, AMX) in one `run` call: the
# quiet-pass commands of docs/benchmarks.md on two pinned cores, ours then
# llama.cpp's per file, for Qwen2.5-0.5B and Llama-3.2-1B shapes x Q4_0,
# Q4_K_M, Q8_0, F16; then bench-engine's 8-sequence step and prompt-only
# throughput. Ours is the Makefile's portable build (-O2 -march=x86-64-v2,
# kernels chosen at run time) of tools/bench_only (no server libraries; its
# sgemm is sgemm_fast.c, which these paths do not reach: quantized prompts go
# through AMX, F16 through our own GEMM).
#   OUT=/tmp/o bash tools/device_intel_pass.sh      (from the repo root)
# Needs build-h7dev/ carried: llama_src.tgz (llama.cpp's source from the npm
# package node-llama-cpp), pcre2/ (Debian's static libpcre2-8), the Llama 3 and
# Qwen2 vocabularies. Knobs: CORES (14,15: the engine runs), PAIRS (core pairs
# for tg, space-separated; default CORES), SHAPES, TYPES, DEADLINE (570 s).
# Writes $OUT/ipass/: log.txt, ours.jsonl, llama.jsonl, engine.jsonl.
set -u
O=${OUT:-/tmp/out}/ipass
mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
t0=$(date +%s)
stamp() { echo "== $(( $(date +%s) - t0 )) s: $*"; }
left() { echo $(( ${DEADLINE:-570} - ($(date +%s) - t0) )); }
CORES=${CORES:-14,15}
SHAPES=${SHAPES:-qwen2.5-0.5b llama-3.2-1b}
TYPES=${TYPES:-q4_0 q4_k_m q8_0 f16}
DEV=${DEV:-build-h7dev}
lscpu | grep -E 'Model name|^CPU\(s\)' | cut -c1-100
grep -o -m1 'avx512_vnni\|amx_int8\|amx_bf16\|avx512_bf16\|avx_vnni' /proc/cpuinfo | sort -u | paste -sd' '
echo "load $(cat /proc/loadavg)"

# 1. llama.cpp (CPU only, GGML_NATIVE=ON) on cores 0-11 in the background
[ -d /tmp/ip_llama ] || { mkdir -p /tmp/ip_llama && tar xzf $DEV/llama_src.tgz -C /tmp/ip_llama; }
LSRC=$(dirname "$(find /tmp/ip_llama -maxdepth 2 -name CMakeLists.txt | head -1)")
( taskset -c 0-11 cmake -S "$LSRC" -B /tmp/ip_llcpu -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_CUDA=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DBUILD_SHARED_LIBS=OFF > /dev/null &&
  taskset -c 0-11 cmake --build /tmp/ip_llcpu --target llama-bench -j 12; echo "llama rc $?" ) > "$O/llama_build.log" 2>&1 &
llama_pid=$!

# 2. the model files (cores 12-13) while ours builds (cores 12-13 too)
for s in $SHAPES; do
    case $s in qwen*) V=$DEV/ggml-vocab-qwen2.gguf ;; *) V=$DEV/ggml-vocab-llama-bpe.gguf ;; esac
    for t in $TYPES; do
        [ -s /tmp/ip_$s-$t.gguf ] && continue
        taskset -c 12,13 python3 tools/random_model --shape $s --type $t --vocab $V -o /tmp/ip_$s-$t.gguf \
            > "$O/model_$s-$t.log" 2>&1 &
    done
done
OBJ=/tmp/ip_obj; mkdir -p $OBJ
CF="-std=gnu11 -O2 -march=x86-64-v2 -pthread -I. -Itools/bench_only -I$DEV/pcre2/include -w"
LIBSRC="src/cli/bench.c src/cli/bench_util.c src/cli/args.c src/cli/bench_engine.c src/engine/engine.c
        src/engine/kv_pool.c src/engine/prefix_store.c llm/grammar/grammar.c
        tools/bench_only/sgemm_fast.c $(ls llm/*.c | grep -v 'llm/chat') $(ls src/core/*.c src/core/arch/x86/*.c | grep -v '/download\.c$')"
echo $LIBSRC | tr ' ' '\n' | grep . |
    taskset -c 12,13 xargs -P 2 -I{} sh -c "cc $CF -c {} -o $OBJ/\$(echo {} | tr / _).o || echo 'compile failed: {}'"
cc $CF -Dcblas_sgemm=bench_only_plain_sgemm -c tools/bench_only/bench_only.c -o $OBJ/bo.o
cc $CF -Dmain=bench_only_main -Dcblas_sgemm=bench_only_plain_sgemm -c tools/bench_only/bench_only.c -o $OBJ/stub.o
cc $CF -c tools/bench_only/bench_engine_only.c -o $OBJ/beo.o
LIBO=$(for f in $LIBSRC; do echo $OBJ/$(echo $f | tr / _).o; done)
L="$DEV/pcre2/lib/libpcre2-8.a -lm -pthread"
cc -o /tmp/ip_bench $OBJ/bo.o $LIBO $L || echo "bench link failed"
cc -o /tmp/ip_engine $OBJ/beo.o $OBJ/stub.o $LIBO $L || echo "bench_engine link failed"
stamp "ours built"
wait $(jobs -p | grep -v "^$llama_pid$") 2>/dev/null
ls -la /tmp/ip_*.gguf | awk '{print $5, $9}'
stamp "files"
while kill -0 $llama_pid 2>/dev/null && [ "$(left)" -gt 300 ]; do sleep 2; done
tail -1 "$O/llama_build.log"
stamp "llama.cpp built"
LB=/tmp/ip_llcpu/bin/llama-bench

# 3. per file: tg (ours, llama.cpp) on each core pair of PAIRS, then pp
# (ours, llama.cpp) on the first, all in the same minute
pick() { grep -o "$1" | head -1 | sed 's/.*: //'; }
PAIRS=${PAIRS:-$CORES}
for s in $SHAPES; do
    for t in $TYPES; do
        F=/tmp/ip_$s-$t.gguf; [ -s $F ] || continue
        [ "$(left)" -gt 40 ] || break
        for c in $PAIRS; do
            o=$(timeout 90 taskset -c $c /tmp/ip_bench -m $F --threads 2 -p 16 -n 64 --reps 2 --json 2>/dev/null | grep '^{')
            echo "$o" | sed "s/^{/{\"shape\": \"$s\", \"type\": \"$t\", \"test\": \"tg\", \"cores\": \"$c\", /" >> "$O/ours.jsonl"
            l=$(timeout 90 taskset -c $c $LB -m $F -t 2 -p 0 -n 64 -r 2 -o jsonl 2>/dev/null | grep '^{')
            echo "$l" | sed "s/^{/{\"shape\": \"$s\", \"type\": \"$t\", \"test\": \"tg\", \"cores\": \"$c\", /" >> "$O/llama.jsonl"
            echo "RESULT $s $t cores $c: tg ours $(echo "$o" | pick '"tg_tok_s": [0-9.]*') llama $(echo "$l" | pick '"avg_ts": [0-9.]*')" \
                 "bwf $(echo "$o" | pick '"bandwidth_fraction": [0-9.]*') bw $(echo "$o" | pick '"bandwidth_gb_s": [0-9.]*')" \
                 "| cpu $(echo "$o" | pick '"cpu": "[a-z0-9]*"')"
        done
        c=${PAIRS%% *}
        op=$(timeout 90 taskset -c $c /tmp/ip_bench -m $F --threads 2 -p 512 -n 1 --reps 2 --no-bandwidth --json 2>/dev/null | grep '^{')
        echo "$op" | sed "s/^{/{\"shape\": \"$s\", \"type\": \"$t\", \"test\": \"pp\", \"cores\": \"$c\", /" >> "$O/ours.jsonl"
        lp=$(timeout 90 taskset -c $c $LB -m $F -t 2 -p 512 -n 0 -r 2 -o jsonl 2>/dev/null | grep '^{')
        echo "$lp" | sed "s/^{/{\"shape\": \"$s\", \"type\": \"$t\", \"test\": \"pp\", \"cores\": \"$c\", /" >> "$O/llama.jsonl"
        echo "RESULT $s $t cores $c: pp ours $(echo "$op" | pick '"pp_tok_s": [0-9.]*') llama $(echo "$lp" | pick '"avg_ts": [0-9.]*')"
    done
done
stamp "bench"

# 4. the engine: the 8-sequence decode step against one, prompt-only throughput
E=/tmp/ip_qwen2.5-0.5b-q4_k_m.gguf
for r in 1 2; do
    [ "$(left)" -gt 25 ] || break
    timeout 60 taskset -c $CORES /tmp/ip_engine -m $E --concurrency 1,8 --prompt-tokens 64 --gen-tokens 16 \
        --threads 2 --json 2>/dev/null | grep '^{' | sed "s/^{/{\"run\": \"decode$r\", /" >> "$O/engine.jsonl"
    [ "$(left)" -gt 20 ] || break
    timeout 60 taskset -c $CORES /tmp/ip_engine -m $E --concurrency 1,8 --prompt-tokens 128 --gen-tokens 1 \
        --threads 2 --json 2>/dev/null | grep '^{' | sed "s/^{/{\"run\": \"prompt$r\", /" >> "$O/engine.jsonl"
done
grep -o '"run": "[a-z0-9]*"\|"concurrency":[0-9]*\|"aggregate_tok_s":[0-9.]*\|"decode_step_ms":[0-9.]*\|"prompt_tok_s":[0-9.]*' \
    "$O/engine.jsonl" | paste -sd' ' | sed 's/"run"/\n"run"/g'
echo "load $(cat /proc/loadavg)"
stamp done
