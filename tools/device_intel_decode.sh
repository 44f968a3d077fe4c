#!/bin/bash
# device_intel_decode.sh - issue [9] decode on the GPU machine's Intel CPU
# host (AVX-512 VNNI, AMX): the quant/matmul unit tests at every OMNI_CPU
# level the host has, the decode dots streaming from memory per level and
# prefetch setting (tests/bench_decode.c), and tg64 against llama.cpp on two
# pinned cores, ours and theirs alternately. Runs from the repo root; writes
# $OUT/$JOB/ (log.txt, tests_<level>.txt, decode.jsonl, tg.jsonl, llama.jsonl).
#
# Needs, besides the work tree: llama.cpp's source, Debian's static pcre2 and
# the Llama 3 vocabulary, from $DEV (an ignored folder carried by the `run`
# tool: build-h7dev, see docs/gpu.md) or else unpacked from $BUNDLE (an
# untracked tarball of the same three, devq/b_bundle.tgz).
# Our code builds as the Makefile's portable build does (-O2
# -march=x86-64-v2, kernels picked from CPUID), OpenBLAS replaced by
# tools/bench_only's plain sgemm (decode never reaches it).
#   OUT=/tmp/o JOB=b_intel bash tools/device_intel_decode.sh
# Knobs: CORES (the two pinned cores, default 14,15), BUILD_CORES (0-11),
# GEN_CORES (12,13), TG_ROUNDS (2), TYPES (q4_0 q8_0 q4_k_m), LLAMA (1; 0 skips
# llama.cpp), JOBS (12 compiles at once), PY (python3), DEADLINE (195 s).
set -u
JOB=${JOB:-b_intel}
O=${OUT:-/tmp/out}/$JOB
mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
t0=$(date +%s)
stamp() { echo "== $(( $(date +%s) - t0 )) s: $*"; }
CORES=${CORES:-14,15}
BUILD_CORES=${BUILD_CORES:-0-11}
TG_ROUNDS=${TG_ROUNDS:-2}
TYPES=${TYPES:-q4_0 q8_0 q4_k_m}
LLAMA=${LLAMA:-1}
DEADLINE=${DEADLINE:-195}   # seconds: later steps are skipped past it
left() { echo $(( DEADLINE - ($(date +%s) - t0) )); }

DEV=${DEV:-build-h7dev}
BUNDLE=${BUNDLE:-devq/b_bundle.tgz}
if [ ! -d "$DEV/llama.cpp" ] || [ ! -d "$DEV/pcre2" ]; then
    DEV=/tmp/b_dev; mkdir -p $DEV && tar xzf "$BUNDLE" -C $DEV || echo "no $BUNDLE"
fi
stamp "machine ($DEV)"
{ lscpu; nproc; cat /proc/loadavg; cc --version | head -1; } > "$O/machine.txt" 2>&1
grep -E "Model name|^CPU\(s\)|L3|Flags" "$O/machine.txt" | cut -c1-120
grep -o 'avx512_vnni\|amx_int8\|avx512bw\|avx_vnni' "$O/machine.txt" | sort -u | paste -sd' '

# 1. llama.cpp's llama-bench in the background
if [ "$LLAMA" = 1 ]; then
    ( taskset -c $BUILD_CORES cmake -S $DEV/llama.cpp -B /tmp/b_llcpu -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
        -DGGML_CUDA=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DBUILD_SHARED_LIBS=OFF &&
      taskset -c $BUILD_CORES cmake --build /tmp/b_llcpu --target llama-bench -j 12; echo "llama rc $?" ) > "$O/llama_build.log" 2>&1 &
    llama_pid=$!
fi

# 2. the model files (Llama-3.2-1B shape) in the background
for t in $TYPES; do
    taskset -c ${GEN_CORES:-12,13} ${PY:-python3} tools/random_model --shape llama-3.2-1b --type $t \
        --vocab $DEV/ggml-vocab-llama-bpe.gguf -o /tmp/b_l1b-$t.gguf > "$O/model_$t.log" 2>&1 &
done

# 3. our objects: bench_only, the unit-test runner (quant/matmul/gemm/ops), bench_decode
OBJ=/tmp/b_obj; mkdir -p $OBJ
CF="-std=gnu11 -O2 -march=x86-64-v2 -pthread -I. -Itools/bench_only -I$DEV/pcre2/include -w"
LIBSRC="src/cli/bench.c src/cli/bench_util.c src/cli/args.c llm/model.c llm/tokenizer.c llm/unicode.c
        $(ls llm/moe.c llm/deltanet.c llm/model_dev.c 2>/dev/null) $(ls src/core/*.c src/core/arch/x86/*.c | grep -v '/download\.c$')"
TSRC="tests/test_main.c tests/test_quant.c tests/test_matmul.c $(ls tests/test_gemm_act8.c tests/test_ops.c 2>/dev/null)"
echo $LIBSRC $TSRC tools/bench_only/bench_only.c tests/bench_decode.c | tr ' ' '\n' | grep . |
    taskset -c $BUILD_CORES xargs -P ${JOBS:-12} -I{} sh -c "cc $CF -c {} -o $OBJ/\$(echo {} | tr / _).o || echo 'compile failed: {}'"
cc $CF -Dmain=bench_only_main -c tools/bench_only/bench_only.c -o $OBJ/stub.o
LIBO=$(for f in $LIBSRC; do echo $OBJ/$(echo $f | tr / _).o; done)
TO=$(for f in $TSRC; do echo $OBJ/$(echo $f | tr / _).o; done)
cc -o /tmp/b_bench $OBJ/tools_bench_only_bench_only.c.o $LIBO $DEV/pcre2/lib/libpcre2-8.a -lm -pthread || echo "bench link failed"
cc -o /tmp/b_tests $TO $OBJ/stub.o $LIBO $DEV/pcre2/lib/libpcre2-8.a -lm -pthread || echo "test link failed"
cc -o /tmp/b_decode $OBJ/tests_bench_decode.c.o $OBJ/stub.o $LIBO $DEV/pcre2/lib/libpcre2-8.a -lm -pthread || echo "bench_decode link failed"
# the same with the dots' benchmark variant OMNI_X86_NIBBLES_INSERT
mkdir -p $OBJ/v
for f in src/core/arch/x86/quants_avx2.c src/core/arch/x86/quants_avx512.c; do
    cc $CF -DOMNI_X86_NIBBLES_INSERT -c $f -o $OBJ/v/$(echo $f | tr / _).o
done
LIBV=$(for f in $LIBSRC; do [ -f $OBJ/v/$(echo $f | tr / _).o ] && echo $OBJ/v/$(echo $f | tr / _).o || echo $OBJ/$(echo $f | tr / _).o; done)
cc -o /tmp/b_decode_v $OBJ/tests_bench_decode.c.o $OBJ/stub.o $LIBV $DEV/pcre2/lib/libpcre2-8.a -lm -pthread || echo "bench_decode variant link failed"
stamp "built"

# 4. unit tests at every level the host has (each run also loops over the
#    levels up to its cap itself)
for lvl in scalar avx2 avx512 avx512vnni amx; do
    OMNI_CPU=$lvl timeout 60 taskset -c $CORES /tmp/b_tests quant > "$O/tests_$lvl.txt" 2>&1
    OMNI_CPU=$lvl timeout 60 taskset -c $CORES /tmp/b_tests matmul >> "$O/tests_$lvl.txt" 2>&1
    OMNI_CPU=$lvl timeout 30 taskset -c $CORES /tmp/b_tests gemm_ >> "$O/tests_$lvl.txt" 2>&1
    OMNI_CPU=$lvl timeout 30 taskset -c $CORES /tmp/b_tests ops_ >> "$O/tests_$lvl.txt" 2>&1
    echo "$lvl: $(grep -h 'passed' "$O/tests_$lvl.txt" | paste -sd' ')"
    grep -h -A3 'FAIL' "$O/tests_$lvl.txt" | head -20
done
stamp "tests"

# 5. the decode dots streaming from memory (Llama-3.2-1B's ffn shape) on the
#    pinned cores, per level: 2 threads through the kernels decode runs
#    (vec_dot_prep where the type has it: its own prefetch 4 rows ahead) and
#    through plain vec_dot with the bench's prefetch 4 rows ahead, and one
#    core with the weights in cache (the compute bound); q4_0/q5_0 also
#    with the OMNI_X86_NIBBLES_INSERT variant ("bin": "v"); then plain
#    vec_dot prefetching 8 and 16 rows ahead.
dec() { # binary tag level args...
    local b=$1 tag=$2 lvl=$3; shift 3
    [ "$(left)" -gt 100 ] || return
    OMNI_CPU=$lvl timeout 20 taskset -c $CORES $b -r 3 "$@" | grep '"type"' | sed "s/^{/{\"bin\":\"$tag\",/" >> "$O/decode.jsonl"
}
for t in q8_0 q4_0 q5_0 q4_K; do
    for lvl in avx2 avx512vnni; do
        dec /tmp/b_decode b $lvl -t $t -s 2048x8192 -n 2
        dec /tmp/b_decode b $lvl -t $t -s 2048x8192 -n 2 -x 1 -p 4
        dec /tmp/b_decode b $lvl -t $t -s 2048x512 -n 1 -c 1
        case $t in q4_0|q5_0)
            dec /tmp/b_decode_v v $lvl -t $t -s 2048x8192 -n 2
            dec /tmp/b_decode_v v $lvl -t $t -s 2048x512 -n 1 -c 1 ;;
        esac
    done
done
for t in q8_0 q4_0; do
    for p in 8 16; do dec /tmp/b_decode b avx512vnni -t $t -s 2048x8192 -n 2 -x 1 -p $p; done
done
sed 's/"checksum".*//' "$O/decode.jsonl"
stamp "decode dots"

# 6. tg64 on the pinned cores. Ours first on every file (and at avx2 on
#    q4_0/q8_0), then, once llama.cpp is built, llama.cpp and ours
#    alternately per file.
wait $(jobs -p | grep -v "^${llama_pid:-x}$") 2>/dev/null
ls -la /tmp/b_l1b-*.gguf
LB=/tmp/b_llcpu/bin/llama-bench
ours() { # round file [env]
    [ "$(left)" -gt 12 ] || return
    env ${3:-X=1} timeout 60 taskset -c $CORES /tmp/b_bench -m /tmp/b_l1b-$2.gguf -t 2 -p 1 -n 64 --reps 2 --json 2>/dev/null |
        grep '^{' | sed "s/^{/{\"round\": $1, \"file\": \"$2\", \"env\": \"${3:-}\", /" >> "$O/tg.jsonl"
    echo "round $1 $2 ours ${3:-}: $(grep "\"round\": $1, \"file\": \"$2\", \"env\": \"${3:-}\"" "$O/tg.jsonl" | grep -o '"tg_tok_s": [0-9.]*\|"bandwidth_gb_s": [0-9.]*\|"bandwidth_fraction": [0-9.]*' | paste -sd' ')"
}
theirs() { # round file
    [ -x $LB ] && [ "$(left)" -gt 12 ] || return
    timeout 60 taskset -c $CORES $LB -m /tmp/b_l1b-$2.gguf -t 2 -p 0 -n 64 -r 2 -o jsonl 2>/dev/null |
        sed "s/^{/{\"round\": $1, \"file\": \"$2\", /" >> "$O/llama.jsonl"
    echo "round $1 $2 llama.cpp: $(grep "\"round\": $1, \"file\": \"$2\"" "$O/llama.jsonl" | grep -o '"avg_ts": [0-9.]*' | paste -sd' ')"
}
stamp "tg"
for t in $TYPES; do ours 1 $t; done
for t in $TYPES; do [ $t = q4_k_m ] || ours 1 $t OMNI_CPU=avx2; done
if [ "$LLAMA" = 1 ]; then
    while kill -0 $llama_pid 2>/dev/null && [ "$(left)" -gt 45 ]; do sleep 2; done
    tail -1 "$O/llama_build.log"
fi
for r in $(seq 2 $TG_ROUNDS); do
    for t in $TYPES; do theirs $r $t; ours $r $t; done
done
[ "$TG_ROUNDS" -ge 2 ] && for t in $TYPES; do theirs 3 $t; done
cat /proc/loadavg
stamp done
