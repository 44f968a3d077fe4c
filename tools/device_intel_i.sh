#!/bin/bash
# device_intel_i.sh - issue 13 [9] on the GPU machine's Intel CPU host
# (Sapphire Rapids class: AVX-512 VNNI, AMX), engineer I's rounds: the unit
# tests at every OMNI_CPU level, decode's q8_0/q4_0 dots streaming from
# memory with the OMNI_X86_PF prefetch variants of quants_avx512.c (A B A B),
# tg64 (and pp512 where STEPS has pp) against llama.cpp on two pinned cores,
# the int8 GEMM (tests/bench_matmul.c) per level. Runs from the repo root;
# writes $OUT/$JOB/ (log.txt, tests_<level>.txt, decode.jsonl, tg.jsonl,
# llama.jsonl, matmul.txt).
#   OUT=/tmp/o JOB=i_intel1 bash tools/device_intel_i.sh
# Needs build-h7dev/ (llama.cpp's source, Debian's static pcre2, the Llama 3
# vocabulary; carried by the round, see docs/gpu.md). Our code builds as the
# Makefile's portable build (-O2 -march=x86-64-v2); tools/bench_only's
# plain sgemm replaced by tools/bench_only/sgemm_fast.c where it exists.
# Knobs: STEPS (tests asan dots vdots stream tg lv pp matmul bd engine mmb), CFX (extra cc flags),
# CORES (14,15), TYPES, VOCAB (the files' vocabulary: Llama 3's), DEADLINE (195 s), SHAPE (llama-3.2-1b: random_model's shape of the
# files), TEST_LEVELS (every level), ASAN_LEVEL (amx), LV_LEVELS and DOT_LEVELS (avx2 avxvnni
# avx512vnni: the levels steps lv and vdots compare), ENGLEVELS (amx avx512vnni), WAIT_TESTS, MM_RUNS
# (level:type:shape:batches runs of bench_matmul for step matmul instead of its default set).
set -u
JOB=${JOB:-i_intel}
O=${OUT:-/tmp/out}/$JOB
mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
t0=$(date +%s)
stamp() { echo "== $(( $(date +%s) - t0 )) s: $*"; }
STEPS=${STEPS:-tests dots tg}
has() { case " $STEPS " in *" $1 "*) return 0;; esac; return 1; }
CORES=${CORES:-14,15}
BUILD_CORES=${BUILD_CORES:-0-11}
TYPES=${TYPES:-q8_0 q4_0 q4_k_m}
SHAPE=${SHAPE:-llama-3.2-1b}
TEST_LEVELS=${TEST_LEVELS:-scalar avx2 avxvnni avx512 avx512vnni amx}
LV_LEVELS=${LV_LEVELS:-avx2 avxvnni avx512vnni}
DOT_LEVELS=${DOT_LEVELS:-$LV_LEVELS}
BDTYPES=${BDTYPES:-q8_0 q4_k_m}
DEADLINE=${DEADLINE:-195}
left() { echo $(( DEADLINE - ($(date +%s) - t0) )); }
DEV=${DEV:-build-h7dev}
[ -d $DEV/llama.cpp ] || { [ -f $DEV/llama_src.tgz ] && tar xzf $DEV/llama_src.tgz -C $DEV; }
stamp "machine"
{ lscpu; nproc; cat /proc/loadavg; cc --version | head -1; cat /sys/kernel/mm/transparent_hugepage/enabled; } > "$O/machine.txt" 2>&1
echo "THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)"
grep -E "Model name|^CPU\(s\)|L2|L3" "$O/machine.txt" | cut -c1-120
grep -o 'avx512_vnni\|amx_int8\|avx512bw\|avx_vnni\|avx512_bf16' "$O/machine.txt" | sort -u | paste -sd' '
cat /proc/loadavg

# 1. llama.cpp's llama-bench in the background
if has tg || has pp; then
    ( taskset -c $BUILD_CORES cmake -S $DEV/llama.cpp -B /tmp/i_llcpu -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
        -DGGML_CUDA=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DBUILD_SHARED_LIBS=OFF &&
      taskset -c $BUILD_CORES cmake --build /tmp/i_llcpu --target llama-bench -j 10; echo "llama rc $?" ) > "$O/llama_build.log" 2>&1 &
    llama_pid=$!
fi
if has tg || has lv || has pp || has bd || has engine; then
    for t in $TYPES; do
        taskset -c 12,13 python3 tools/random_model --shape $SHAPE --type $t \
            --vocab ${VOCAB:-$DEV/ggml-vocab-llama-bpe.gguf} -o /tmp/i_$SHAPE-$t.gguf > "$O/model_$t.log" 2>&1 &
    done
fi

# 2. our objects; variants of quants_avx512.c: "pf<V>_<D>" = -DOMNI_X86_PF=V
#    -DOMNI_X86_PF_DIST=D
OBJ=/tmp/i_obj; mkdir -p $OBJ
CF="-std=gnu11 -O2 -march=x86-64-v2 -pthread -I. -Itools/bench_only -I$DEV/pcre2/include -w ${CFX:-}"
LIBSRC="src/cli/bench.c src/cli/bench_util.c src/cli/args.c llm/model.c llm/tokenizer.c llm/unicode.c
        $(ls llm/moe.c llm/deltanet.c llm/model_dev.c 2>/dev/null) $(ls src/core/*.c src/core/arch/x86/*.c | grep -v '/download\.c$')"
TSRC="tests/test_main.c tests/test_quant.c tests/test_matmul.c $(ls tests/test_gemm_act8.c tests/test_ops.c tests/test_cpu.c 2>/dev/null)"
SG=""; [ -f tools/bench_only/sgemm_fast.c ] && SG=tools/bench_only/sgemm_fast.c
[ -n "${SKIP_MAIN:-}" ] || echo $LIBSRC $TSRC tests/bench_decode.c $SG | tr ' ' '\n' | grep . |
    taskset -c ${OUR_CORES:-12-15} xargs -P ${OUR_JOBS:-4} -I{} sh -c "cc $CF -c {} -o $OBJ/\$(echo {} | tr / _).o || echo 'compile failed: {}'"
# bench_only with its plain sgemm renamed away when sgemm_fast.c takes over
if [ -n "$SG" ]; then
    cc $CF -Dcblas_sgemm=bench_only_plain_sgemm -c tools/bench_only/bench_only.c -o $OBJ/bo.o
    BO="$OBJ/bo.o $OBJ/tools_bench_only_sgemm_fast.c.o"
else
    cc $CF -c tools/bench_only/bench_only.c -o $OBJ/bo.o; BO=$OBJ/bo.o
fi
cc $CF -Dmain=bench_only_main -c tools/bench_only/bench_only.c -o $OBJ/stub.o
# bench-engine without the server's libraries (step "engine")
if has engine; then
    ENGSRC="tools/bench_only/bench_engine_only.c src/cli/bench_engine.c src/engine/engine.c src/engine/kv_pool.c
            src/engine/prefix_store.c llm/grammar/grammar.c llm/sampler.c"
    echo $ENGSRC | tr ' ' '\n' | grep . |
        taskset -c ${OUR_CORES:-12-15} xargs -P ${OUR_JOBS:-4} -I{} sh -c "cc $CF -c {} -o $OBJ/\$(echo {} | tr / _).o || echo 'compile failed: {}'"
    cc $CF -Dmain=bench_only_main ${SG:+-Dcblas_sgemm=bench_only_plain_sgemm} -c tools/bench_only/bench_only.c -o $OBJ/stub_e.o
fi
LIBO=$(for f in $LIBSRC; do echo $OBJ/$(echo $f | tr / _).o; done)
TO=$(for f in $TSRC; do echo $OBJ/$(echo $f | tr / _).o; done)
L="$DEV/pcre2/lib/libpcre2-8.a -lm -pthread"
cc -o /tmp/i_bench $BO $LIBO $L || echo "bench link failed"
cc -o /tmp/i_tests $TO $OBJ/stub.o $LIBO $L || echo "test link failed"
cc -o /tmp/i_decode $OBJ/tests_bench_decode.c.o $OBJ/stub.o $LIBO $L || echo "bench_decode link failed"
VARIANTS=${VARIANTS:-pf0_0 pf1_8192 q8u}
GVARIANTS=${GVARIANTS:-g_min64 g_r4}
KVARIANTS=${KVARIANTS:-gk_off}
AVARIANTS=${AVARIANTS:-amx_old}
MVARIANTS=${MVARIANTS:-}
# pf<V>_<D>: quants_avx512.c with -DOMNI_X86_PF=V -DOMNI_X86_PF_DIST=D;
# q8u: with -DOMNI_X86_Q8_U=1; q40old / q50old / w4old: the VNNI q4_0 / q5_0
# / both decode dots a block at a time (-DOMNI_X86_Q40_W4=0,
# -DOMNI_X86_Q50_W4=0: before four blocks a register); q4kold: the VNNI
# q4_K decode dot in the AVX2 twin's 256-bit steps (-DOMNI_X86_Q4K_W=0);
# q6kold / q80old: level AVX512's q6_K / vec_dot's q8_0 decode dots;
# novbmi: the q4_0/q5_0 four-block forms without VBMI's byte permutes
# (-DOMNI_X86_Q40_VBMI=0); even: decode's products (one row, and the int8
# GEMM below 32 rows) split evenly between the threads instead of taken as
# they go (-DOMNI_MATMUL_GUIDED=0);
# g_min64 / g_r4 / g_pf0: gemm_avx512.c with -DOMNI_X86_ACT8_MIN=64 (the
# 4 x 4 tiles only) / -DOMNI_X86_ACT8_R=4 / -DOMNI_X86_ACT8_PF=0; gk_off /
# gk_r2: gemm_k_avx512.c without its a8 form / with 2-row tiles; amx_old:
# amx.c with -DOMNI_X86_AMX_SMALL=1 (AMX from 2-6 rows as before)
has matmul && cc $CF -DNO_BLAS -c tests/bench_matmul.c -o $OBJ/bm.o
vsrc() { # variant -> "source flags" (the source whose object the variant replaces)
    case $1 in
    pf*) local pv=${1#pf}; pv=${pv%%_*}; echo "src/core/arch/x86/quants_avx512.c -DOMNI_X86_PF=$pv -DOMNI_X86_PF_DIST=${1##*_}" ;;
    q8u) echo "src/core/arch/x86/quants_avx512.c -DOMNI_X86_Q8_U=1" ;;
    q40old) echo "src/core/arch/x86/quants_avx512.c -DOMNI_X86_Q40_W4=0" ;;
    q50old) echo "src/core/arch/x86/quants_avx512.c -DOMNI_X86_Q50_W4=0" ;;
    w4old) echo "src/core/arch/x86/quants_avx512.c -DOMNI_X86_Q40_W4=0 -DOMNI_X86_Q50_W4=0" ;;
    q4kold) echo "src/core/arch/x86/quants_avx512.c -DOMNI_X86_Q4K_W=0" ;;
    q6kold) echo "src/core/arch/x86/quants_avx512.c -DOMNI_X86_Q6K_W=0" ;;
    q80old) echo "src/core/arch/x86/quants_avx512.c -DOMNI_X86_Q80_W4=0" ;;
    novbmi) echo "src/core/arch/x86/quants_avx512.c -DOMNI_X86_Q40_VBMI=0" ;;
    even) echo "src/core/matmul.c -DOMNI_MATMUL_GUIDED=0" ;;
    ms1|ms2|ms4) echo "src/core/arch/x86/quants_avx512.c -DOMNI_X86_STREAMS=${1#ms}" ;;
    s*d*) local sv=${1#s}; echo "src/core/arch/x86/quants_avx512.c -DOMNI_X86_STREAMS=${sv%%d*} -DOMNI_X86_PF_DIST=${1##*d}" ;;
    amx_old) echo "src/core/arch/x86/amx.c -DOMNI_X86_AMX_SMALL=1" ;;
    g_min64) echo "src/core/arch/x86/gemm_avx512.c -DOMNI_X86_ACT8_MIN=64" ;;
    g_r4) echo "src/core/arch/x86/gemm_avx512.c -DOMNI_X86_ACT8_R=4" ;;
    g_pf0) echo "src/core/arch/x86/gemm_avx512.c -DOMNI_X86_ACT8_PF=0" ;;
    gk_off) echo "src/core/arch/x86/gemm_k_avx512.c -DOMNI_X86_A8K_MIN=2147483647" ;;
    gk_r2) echo "src/core/arch/x86/gemm_k_avx512.c -DOMNI_X86_A8K_R=2" ;;
    nommap|hp) echo "llm/model.c" ;;
    a2s*) echo "src/core/arch/x86/quants_avx2.c -DOMNI_X86_AVX2_STREAMS=${1#a2s}" ;;
    vns*) echo "src/core/arch/x86/quants_avxvnni.c -DOMNI_X86_AVX2_STREAMS=${1#vns}" ;;
    vkq0) echo "src/core/arch/x86/quants_avxvnni.c -DOMNI_X86_VNNI_KQ=0" ;;
    k512s*) echo "src/core/arch/x86/quants_avx512.c -DOMNI_X86_K_STREAMS=${1#k512s}" ;;
    f512s*) echo "src/core/arch/x86/quants_avx512.c -DOMNI_X86_F16_STREAMS_512=${1#f512s}" ;;
    esac
}
# a2s<S> / vns<S>: the AVX2 / AVX-VNNI one-row dots with S row streams a
# thread (quants_avx2.c's OMNI_X86_AVX2_STREAMS; 1 = one row at a time);
# vkq0: the AVX-VNNI K-quant dots without vpdpwssd (OMNI_X86_VNNI_KQ=0);
# k512s<S> / f512s<S>: the AVX-512 q6_K and VNNI q4_K, q5_K / the AVX-512 f16 decode rows with S
# streams (1: one row at a time)
# nommap / hp: llm/model.c loading the whole file into memory (use_mmap
# false; hp: into 2 MiB-aligned memory with MADV_HUGEPAGE), to tell the
# page size and the page cache apart from the kernels
csrc() { # variant -> the file to compile
    case $1 in
    nommap|hp)
        { echo '#include <sys/mman.h>'; echo '#include <stdlib.h>'
          echo 'static void *i_alloc(size_t n) { size_t a = (size_t)2 << 20, sz = (n + a - 1) / a * a; void *p = aligned_alloc(a, sz);'
          [ $1 = hp ] && echo 'if (p) madvise(p, sz, MADV_HUGEPAGE);'
          echo 'return p; }'; echo '#line 1 "llm/model.c"'
          sed 's/buf = malloc(n ? (size_t)n : 1)/buf = i_alloc(n ? (size_t)n : 1)/; s/\.use_mmap = true/.use_mmap = false/' llm/model.c
        } > /tmp/i_model_$1.c
        echo "/tmp/i_model_$1.c -Illm" ;;
    *) vsrc $1 ;;
    esac
}
# the variant objects 4 at a time, then each variant's binaries (in parallel)
for v in $VARIANTS $GVARIANTS $KVARIANTS $AVARIANTS $MVARIANTS; do set -- $(csrc $v); src=$1; shift; echo "$src $* -o $OBJ/v_$v.o"; done |
    taskset -c ${OUR_CORES:-12-15} xargs -r -P ${OUR_JOBS:-4} -L 1 sh -c "cc $CF -c \$0 \"\$@\" || echo 'variant compile failed: \$*'"
lpids=""
for v in $VARIANTS $GVARIANTS $KVARIANTS $AVARIANTS $MVARIANTS; do
    src=$(vsrc $v | cut -d' ' -f1)
    LV=$(echo $LIBO | sed "s#$OBJ/$(echo $src | tr / _).o#$OBJ/v_$v.o#")
    ( cc -o /tmp/i_decode_$v $OBJ/tests_bench_decode.c.o $OBJ/stub.o $LV $L || echo "decode $v link failed"
      cc -o /tmp/i_bench_$v $BO $LV $L || echo "bench $v link failed"
      if has matmul; then cc -o /tmp/i_matmul_$v $OBJ/bm.o $OBJ/stub.o $LV $L || echo "bench_matmul $v link failed"; fi ) &
    lpids="$lpids $!"
done
[ -n "$lpids" ] && wait $lpids
has matmul && { cc -o /tmp/i_matmul_base $OBJ/bm.o $OBJ/stub.o $LIBO $L || echo "bench_matmul link failed"; }
cp /tmp/i_decode /tmp/i_decode_base; cp /tmp/i_bench /tmp/i_bench_base
if has engine; then
    cc -o /tmp/i_engine $(for f in $ENGSRC; do echo $OBJ/$(echo $f | tr / _).o; done) $OBJ/stub_e.o \
        ${SG:+$OBJ/tools_bench_only_sgemm_fast.c.o} $LIBO $L || echo "bench_engine link failed"
fi
stamp "built"

# 3. unit tests at every level, four levels at once on cores 8-11 (each run
#    also loops over the levels up to its cap)
if has tests; then
    c=7
    for lvl in $TEST_LEVELS; do
        c=$((c + 1)); [ $c -gt 11 ] && c=11
        ( for f in quant matmul gemm_ ops_ cpu_; do OMNI_CPU=$lvl timeout 80 taskset -c $c /tmp/i_tests $f; done > "$O/tests_$lvl.txt" 2>&1 ) &
    done
fi

# 3b. the same tests built with ASan + UBSan (-O1), in the background on
#    cores 4-11 (the AVX-512 and AMX kernels under the sanitizers: this is
#    the only host that runs them); tests_asan.txt
if has asan; then
    ( A=$OBJ/asan; mkdir -p $A
      ACF="-std=gnu11 -O1 -g -march=x86-64-v2 -pthread -I. -Itools/bench_only -I$DEV/pcre2/include -w -fsanitize=address,undefined -fno-omit-frame-pointer ${CFX:-}"
      echo $LIBSRC $TSRC | tr ' ' '\n' | grep . |
          taskset -c ${ASAN_CORES:-4-11} xargs -P ${ASAN_JOBS:-8} -I{} sh -c "cc $ACF -c {} -o $A/\$(echo {} | tr / _).o || echo 'asan compile failed: {}'"
      cc $ACF -Dmain=bench_only_main -c tools/bench_only/bench_only.c -o $A/stub.o
      cc -fsanitize=address,undefined -o /tmp/i_tests_asan $A/*.o $DEV/pcre2/lib/libpcre2-8.a -lm -pthread || echo "asan link failed"
      for f in gemm_ matmul quant ops_ cpu_; do
          ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 OMNI_CPU=${ASAN_LEVEL:-amx} \
              timeout 150 taskset -c ${ASAN_CORES:-4-11} /tmp/i_tests_asan $f
      done ) > "$O/tests_asan.txt" 2>&1 &
    asan_pid=$!
fi

# WAIT_TESTS=1: the measurements below start once the tests, ASan and the
# model files are done (a quiet host: the tests and ASan's build share its
# memory bandwidth)
if [ -n "${WAIT_TESTS:-}" ]; then
    pids=$(jobs -p | grep -v "^${llama_pid:-x}$")
    [ -n "$pids" ] && wait $pids 2>/dev/null
    stamp "tests and ASan done"
fi

# 4. decode dots streaming from memory, 2 threads on the pinned cores, the
#    variants alternately (2 rounds); Llama-3.2-1B's ffn_up (2048 x 8192)
#    and ffn_down (8192 x 2048) shapes
dec() { # binary-variant level args...
    local v=$1 lvl=$2; shift 2
    [ "$(left)" -gt 110 ] || return
    OMNI_CPU=$lvl timeout 20 taskset -c $CORES /tmp/i_decode_$v -r 3 "$@" | grep '"type"' |
        sed "s/^{/{\"bin\":\"$v\",/" >> "$O/decode.jsonl"
}
if has dots; then
    for round in $(seq 1 ${DOT_ROUNDS:-1}); do
        for s in 2048x8192 8192x2048; do
            for v in base $VARIANTS; do dec $v avx512vnni -t q8_0 -s $s -n 2; done
            dec base avx2 -t q8_0 -s $s -n 2
        done
        for v in base pf0_0; do dec $v avx512vnni -t q4_0 -s 2048x8192 -n 2; done
    done
    for v in base $VARIANTS; do dec $v avx512vnni -t q8_0 -s 2048x512 -n 1 -c 1; done
    sed 's/"checksum".*//' "$O/decode.jsonl"
    stamp "decode dots"
fi
# 4a. decode dots per level (DOT_LEVELS, alternately, DOT_ROUNDS rounds):
#    the 0.5B shapes (896 x 4864 ffn_up, 4864 x 896 ffn_down, 896 x 151936
#    output) and the 1B ones, 2 threads on the pinned cores; decode_lv.jsonl.
#    DOT_RUNS ("level:variant ...", default every DOT_LEVELS with base)
#    picks the binaries too.
DOT_RUNS=${DOT_RUNS:-$(for l in $DOT_LEVELS; do printf '%s:base ' $l; done)}
LV_RUNS=${LV_RUNS:-$(for l in $LV_LEVELS; do printf '%s:base ' $l; done)}
if has vdots; then
    for round in $(seq 1 ${DOT_ROUNDS:-1}); do
        for t in ${DOT_TYPES:-q8_0 q4_0 q5_0 q4_K q6_K}; do
            for s in ${DOT_SHAPES:-896x4864 4864x896 2048x8192}; do
                case $t in *_K|*_k) [ $(( ${s%%x*} % 256 )) = 0 ] || continue ;; esac # K-quant rows: whole super-blocks
                for run in $DOT_RUNS; do
                    [ "$(left)" -gt ${VDOTS_LEFT:-110} ] || break
                    lvl=${run%%:*} v=${run#*:}
                    OMNI_CPU=$lvl timeout 20 taskset -c $CORES /tmp/i_decode_$v -r 3 -t $t -s $s -n 2 | grep '"type"' |
                        sed "s/^{/{\"round\":$round,\"cap\":\"$lvl\",\"bin\":\"$v\",/" >> "$O/decode_lv.jsonl"
                done
            done
        done
    done
    sed 's/"checksum".*//' "$O/decode_lv.jsonl"
    stamp "decode dots per level"
fi
# 4b. q8_0 streaming alone (tools/q8_stream.c): memory backings (4 KiB
#    anonymous pages, MADV_HUGEPAGE, a mapped file) x loop shapes (the
#    production loop, S rows in lockstep, repacked rows with 512-bit loads,
#    plain reads), 2 threads on the pinned cores; stream.jsonl
if has stream; then
    cc -O2 -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mf16c -mfma -pthread tools/q8_stream.c -o /tmp/i_q8_stream ||
        echo "q8_stream build failed"
    for s in ${STREAM_SHAPES:-2048x8192 8192x2048}; do
        [ "$(left)" -gt 100 ] || break
        timeout 60 /tmp/i_q8_stream -s $s -c ${CORES} -g ${STREAM_MIB:-768} -r 3 -n ${STREAM_ROUNDS:-2} \
            -k "${STREAM_K:-read1 read2 read1:4096 cur:0 cur:4096 ms2:4096 ms4:4096 rp:4096 rp:8192 rpms2:4096}" \
            -b "${STREAM_B:-anon huge file}" >> "$O/stream.jsonl"
    done
    grep -o '"backing":"[a-z]*","kernel":"[^"]*","round":[0-9],"shape":"[0-9x]*"\|"gb_s_best":[0-9.]*,"gb_s_median":[0-9.]*' "$O/stream.jsonl" |
        paste -d' ' - - | sed 's/"//g'
    stamp "stream"
fi
# (a bare wait would also wait for the tee above: only named jobs)
pids=$(jobs -p | grep -v "^${llama_pid:-x}$" | grep -v "^${asan_pid:-x}$") # ASan is awaited at the end
[ -n "$pids" ] && wait $pids 2>/dev/null
if has tests; then
    for lvl in $TEST_LEVELS; do
        echo "$lvl: $(grep -h 'passed' "$O/tests_$lvl.txt" | paste -sd' ')"
        grep -h -B2 -A3 'FAIL' "$O/tests_$lvl.txt" | head -20
    done
    stamp "tests"
fi

# 5. the int8 GEMM alone, one thread (ms per activation row; the variants
#    alternately), and the batched decode of 8 sequences (bench
#    --batch-decode 8: aggregate tok/s) at avx512vnni, old tiles vs act8
mm() { # variant level type
    [ "$(left)" -gt 75 ] || return
    OMNI_CPU=$2 timeout 20 taskset -c ${CORES%%,*} /tmp/i_matmul_$1 -t $3 -s ${MMSHAPE:-2048x8192} -b ${MMB:-4,8,16} 2>&1 |
        sed "s/^/$1 $2 $3: /" >> "$O/matmul.txt"
}
if has matmul && [ -n "${MM_RUNS:-}" ]; then
    # MM_RUNS="level:type:shape:batches ..." (each run alone, one thread)
    for run in $MM_RUNS; do
        [ "$(left)" -gt 75 ] || break
        IFS=: read -r lvl t shp bs <<< "$run"
        OMNI_CPU=$lvl timeout 30 taskset -c ${CORES%%,*} /tmp/i_matmul_base -t $t -s $shp -b $bs -r ${MMREPS:-5} 2>&1 |
            sed "s/^/$lvl $t $shp: /" >> "$O/matmul.txt"
    done
    cat "$O/matmul.txt"; stamp "matmul runs"
elif has matmul; then
    for t in q8_0 q4_0 q5_0; do
        for v in base $GVARIANTS; do mm $v avx512vnni $t; done
        mm base avx2 $t
    done
    for t in q4_K q6_K; do
        for v in base $KVARIANTS; do mm $v avx512vnni $t; done
        mm base avx2 $t
    done
    cat "$O/matmul.txt"; stamp "matmul"
fi

# 5b. the batch ranges of matmul.c's gemm_range at the VNNI level: per-row
#    dots vs the int8 GEMM vs dequantize + OpenBLAS sgemm (SkylakeX kernels),
#    one thread on the first pinned core, 2..64 rows per type (mmb.txt).
#    The binary is tests/bench_matmul.c linked statically with Debian's
#    OpenBLAS on the development machine (none here), carried xz-compressed
#    as $DEV/i/bench_matmul_blas.xz (never committed).
if has mmb && [ -f $DEV/i/bench_matmul_blas.xz ]; then
    { xz -dc $DEV/i/bench_matmul_blas.xz 2>/dev/null ||
      python3 -c "import lzma,sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())" $DEV/i/bench_matmul_blas.xz; } > /tmp/i_mmb
    chmod +x /tmp/i_mmb
    for t in ${MMBTYPES:-q8_0 q4_0 q5_0 q4_K q5_K q6_K}; do
        [ "$(left)" -gt ${MMB_LEFT:-12} ] || break
        OMNI_CPU=${MMBLVL:-avx512vnni} OPENBLAS_CORETYPE=SkylakeX timeout 40 taskset -c ${CORES%%,*} /tmp/i_mmb -t $t \
            -s ${MMSHAPE:-2048x8192} -b ${MMB:-2,3,4,6,8,12,16,24,32,48,64} -r ${MMREPS:-5} 2>&1 | sed "s/^/$t: /" >> "$O/mmb.txt"
    done
    cat "$O/mmb.txt"; stamp "mmb"
fi
# 6. tg64 (and pp512) on the pinned cores: ours and llama.cpp alternately
ls -la /tmp/i_$SHAPE-*.gguf 2>/dev/null
LB=/tmp/i_llcpu/bin/llama-bench
ours() { # tag file variant args...
    local tag=$1 f=$2 v=$3; shift 3
    [ "$(left)" -gt 15 ] || return
    timeout 60 taskset -c $CORES env ${LVL:+OMNI_CPU=$LVL} /tmp/i_bench_$v -m /tmp/i_$SHAPE-$f.gguf -t 2 --json "$@" 2>/dev/null |
        grep '^{' | sed "s/^{/{\"tag\": \"$tag\", \"file\": \"$f\", \"bin\": \"$v\", /" >> "$O/tg.jsonl"
    echo "$tag $f ours $v $*: $(grep "\"tag\": \"$tag\", \"file\": \"$f\", \"bin\": \"$v\"" "$O/tg.jsonl" | tail -1 |
        grep -o '"pp_tok_s": [0-9.]*\|"tg_tok_s": [0-9.]*\|"bandwidth_gb_s": [0-9.]*\|"bandwidth_fraction": [0-9.]*\|"bd_tok_s": [0-9.]*\|"cpu": "[a-z0-9]*"' | paste -sd' ')"
}
theirs() { # tag file args...
    local tag=$1 f=$2; shift 2
    [ -x $LB ] && [ "$(left)" -gt 15 ] || return
    timeout 60 taskset -c $CORES $LB -m /tmp/i_$SHAPE-$f.gguf -t 2 -o jsonl "$@" 2>/dev/null |
        sed "s/^{/{\"tag\": \"$tag\", \"file\": \"$f\", /" >> "$O/llama.jsonl"
    echo "$tag $f llama.cpp $*: $(grep "\"tag\": \"$tag\", \"file\": \"$f\"" "$O/llama.jsonl" | tail -1 | grep -o '"avg_ts": [0-9.]*')"
}
if has tg || has lv || has pp || has bd || has engine; then
    stamp "tg"
    TGV=${TGV:-base pf0_0 q8u}
    has tg && ours tg0 q8_0 base -p 1 -n 32 --reps 1
    while [ -n "${llama_pid:-}" ] && kill -0 $llama_pid 2>/dev/null && [ "$(left)" -gt 60 ]; do sleep 2; done
    tail -1 "$O/llama_build.log" 2>/dev/null
    if has tg; then
        # q8_0: llama.cpp and our variants alternately, TG_ROUNDS rounds
        for round in $(seq 1 ${TG_ROUNDS:-1}); do
            theirs tg$round q8_0 -p 0 -n ${TGN:-64} -r 2
            for v in $TGV; do ours tg$round q8_0 $v -p 1 -n ${TGN:-64} --reps 2 --no-bandwidth; done
        done
        for t in ${TGTYPES:-$TYPES}; do
            [ $t = q8_0 ] && continue
            theirs tg1 $t -p 0 -n ${TGN:-64} -r 2
            for v in ${TGV2:-base}; do ours tg1 $t $v -p 1 -n ${TGN:-64} --reps 2 --no-bandwidth; done
        done
    fi
    if has lv; then
        # tg (and bandwidth_fraction: bench's own read probe) per level,
        # LV_LEVELS alternately within each file, LV_ROUNDS rounds
        for round in $(seq 1 ${LV_ROUNDS:-1}); do
            for t in $TYPES; do
                for run in $LV_RUNS; do
                    LVL=${run%%:*} ours lv$round-${run%%:*} $t ${run#*:} -p 1 -n ${TGN:-64} --reps 2
                done
            done
        done
    fi
    if has bd; then
        # 8 sequences decoded together (aggregate tok/s) at B rows: level amx
        # (AMX from 16 rows) vs amx_old (AMX from 2-6), and avx512vnni (BDV,
        # BDV512: the variants at each)
        for t in $BDTYPES; do
            for B in ${BDROWS:-8 16 4}; do
                for v in ${BDV:-base amx_old}; do ours bd$B $t $v -p 1 -n 16 --batch-decode $B --reps 1 --no-bandwidth; done
                for v in ${BDV512:-base}; do
                    LVL=avx512vnni ours bd$B $t $v -p 1 -n 16 --batch-decode $B --reps 1 --no-bandwidth
                done
            done
        done
    fi
    if has engine && [ -x /tmp/i_engine ]; then
        # the engine under load: decode step of 8 sequences against one, per level
        for t in ${ENGTYPES:-q4_k_m q8_0}; do
            for lvl in ${ENGLEVELS:-amx avx512vnni}; do
                [ "$(left)" -gt 25 ] || break
                OMNI_CPU=$lvl timeout 60 taskset -c $CORES /tmp/i_engine -m /tmp/i_$SHAPE-$t.gguf --concurrency 1,8 \
                    --prompt-tokens 64 --gen-tokens 32 --threads 2 --json 2>/dev/null | grep '^{' |
                    sed "s/^{/{\"file\": \"$t\", \"level\": \"$lvl\", /" >> "$O/engine.jsonl"
                echo "engine $t $lvl: $(grep "\"file\": \"$t\", \"level\": \"$lvl\"" "$O/engine.jsonl" | cut -c1-300 | paste -sd' ')"
            done
        done
    fi
    if has pp; then
        for t in $TYPES; do
            theirs pp1 $t -p 512 -n 0 -r 1; ours pp1 $t base -p 512 -n 0 --reps 1 --no-bandwidth
        done
    fi
fi
if has asan; then
    while kill -0 $asan_pid 2>/dev/null && [ "$(left)" -gt 3 ]; do sleep 1; done
    echo "asan (level ${ASAN_LEVEL:-amx}, every level below it in each test): $(grep -h 'passed' "$O/tests_asan.txt" | paste -sd' ')"
    grep -h -B2 -A8 'FAIL\|ERROR\|runtime error' "$O/tests_asan.txt" | head -30
fi
cat /proc/loadavg
stamp done
