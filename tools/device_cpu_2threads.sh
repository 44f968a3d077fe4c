#!/bin/bash
# device_cpu_2threads.sh - issue [9] on the GPU machine's CPU host: omniserve (tools/bench_only,
# -march=native) against llama.cpp (built there, CPU only) at 2 threads pinned to the same
# two cores, Llama-3.2-1B shape Q4_0 / Q4_K_M / Q8_0 / F16, pp512 + tg64. Carry build-h7dev/{llama.cpp,
# pcre2,ggml-vocab-llama-bpe.gguf} (see docs/gpu.md); writes $OUT/cpu2/ (log.txt, JSON per file).
DEV=build-h7dev; O=$OUT/cpu2; mkdir -p $O; exec > >(tee -a $O/log.txt) 2>&1
t0=$(date +%s); stamp() { echo "== $(( $(date +%s) - t0 )) s: $*"; }
grep -E "Model name|Flags" /proc/cpuinfo | head -2 | cut -c1-400 | grep -o "Model name.*\|amx[a-z_0-9]*\|avx512_vnni\|avx512_bf16" | sort -u | paste -sd' '
(cmake -S $DEV/llama.cpp -B /tmp/llcpu -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DLLAMA_CURL=OFF \
  -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
  -DBUILD_SHARED_LIBS=OFF && cmake --build /tmp/llcpu --target llama-bench -j 12; echo "llama rc $?") > $O/llama_build.log 2>&1 &
lp=$!
mkdir -p /tmp/bo
SRCS="tools/bench_only/bench_only.c src/cli/bench.c src/cli/bench_util.c src/cli/args.c llm/model.c llm/tokenizer.c llm/unicode.c llm/moe.c llm/deltanet.c llm/model_dev.c $(ls src/core/*.c src/core/arch/x86/*.c | grep -v '/download\.c$')"
echo $SRCS | tr ' ' '\n' | xargs -P 4 -I{} sh -c 'cc -std=gnu11 -O2 -march=native -pthread -I. -Itools/bench_only -I'$DEV'/pcre2/include -w -c {} -o /tmp/bo/$(echo {} | tr / _).o || echo "compile failed: {}"'
cc -o /tmp/bo/bench_only /tmp/bo/*.o $DEV/pcre2/lib/libpcre2-8.a -lm -pthread && stamp "bench_only built"
QV=$DEV/ggml-vocab-qwen2.gguf; LV=$DEV/ggml-vocab-llama-bpe.gguf
for t in q4_0 q4_k_m q8_0 f16; do python3 tools/random_model --shape llama-3.2-1b --type $t --vocab $LV -o /tmp/l1b-$t.gguf > /dev/null 2>&1 & done
wait $(jobs -p | grep -v "^$lp$") 2>/dev/null; sleep 1; ls -la /tmp/*.gguf; stamp "files"
wait $lp; tail -2 $O/llama_build.log; stamp "llama built"
for f in l1b-q4_0 l1b-q4_k_m l1b-q8_0 l1b-f16; do
  F=/tmp/$f.gguf; stamp "$f"
  timeout 120 taskset -c 2,3 /tmp/bo/bench_only -m $F -t 2 -p 512 -n 64 --reps 2 --json 2>/dev/null | grep '^{' > $O/$f.ours.json; cut -c1-400 $O/$f.ours.json | grep -o '"cpu": "[a-z0-9]*"\|"pp_tok_s": [0-9.]*\|"tg_tok_s": [0-9.]*\|"bandwidth_gb_s": [0-9.]*\|"bandwidth_fraction": [0-9.]*' | paste -sd' '
  grep -o '"pp_tok_s": [0-9.]*\|"tg_tok_s": [0-9.]*\|"bandwidth_gb_s": [0-9.]*\|"bandwidth_fraction": [0-9.]*' $O/$f.ours.json | paste -sd' '
  timeout 120 taskset -c 2,3 /tmp/llcpu/bin/llama-bench -m $F -t 2 -p 512 -n 64 -r 2 -o jsonl > $O/$f.llama.jsonl 2>/dev/null
  grep -o '"n_prompt": [0-9]*, "n_gen": [0-9]*\|"avg_ts": [0-9.]*' $O/$f.llama.jsonl | paste -sd' '
done
stamp done
