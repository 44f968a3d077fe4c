#!/bin/bash
# device_thread_scaling.sh - decode thread scaling of omniserve against
# llama.cpp on a many-core machine without our Debian packages (issue [9]
# item 5: the GPU machine's 16-core host, CPU only). Runs from the repo root;
# everything lands in $OUT/thread_scaling/ (logs, JSON lines, a table).
#
# What it needs beside the work tree, in the ignored folder $DEV
# (default build-h2dev, carried by the `run` tool), prepared on the
# development machine:
#   $DEV/llama.cpp/        llama.cpp's source (from node-llama-cpp's bundle,
#                          /tmp/llama.cpp there), without .git, models, docs
#   $DEV/pcre2/{include/pcre2.h,lib/libpcre2-8.a}   Debian's pcre2, static
#   $DEV/ggml-vocab-llama-bpe.gguf                  ../shared/vocab's file
# Steps: llama.cpp's llama-bench (CMake, GGML_NATIVE=ON, CPU only) builds in
# the background while tools/bench_only (omniserve's `bench` with a plain
# sgemm in place of OpenBLAS; decode never reaches it) compiles with
# -march=native and tools/random_model writes Llama-3.2-1B Q4_K_M; then the
# two benchmarks run one after the other on the same file:
#   bench_only -m M -t 1,2,4,8,16 -p 1 -n 64 --reps 3
#   llama-bench -m M -t 1,2,4,8,16 -p 0 -n 64 -r 3 -o jsonl
# Usage (on the device): OUT=/some/dir tools/device_thread_scaling.sh
# A local check of the omniserve half: LLAMA=0 THREADS=1,2 N=8 M=small.gguf
set -u
DEV=${DEV:-build-h2dev}
THREADS=${THREADS:-1,2,4,8,16}
JOBS=${JOBS:-$(nproc)}
N=${N:-64}
REPS=${REPS:-3}
LLAMA=${LLAMA:-1}          # 0: omniserve only (a local test of the script)
M=${M:-$DEV/llama-3.2-1b-q4_k_m.gguf}
CC=${CC:-cc}
command -v "$CC" >/dev/null 2>&1 || CC=gcc
O=${OUT:-/tmp/out}/thread_scaling
mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
t0=$(date +%s)
stamp() { echo "== $(( $(date +%s) - t0 )) s: $*"; }

stamp "machine"
{ lscpu; echo; nproc; cat /proc/loadavg; "$CC" --version | head -1; cmake --version | head -1; python3 -c 'import numpy; print("numpy", numpy.__version__)'; } > "$O/machine.txt" 2>&1
grep -E "Model name|^CPU\(s\)|Thread|Core|Socket|Flags" "$O/machine.txt" | cut -c1-200

# 1. llama.cpp in the background (its own log)
stamp "llama.cpp configure + build (background)"
[ "$LLAMA" = 1 ] && (
    cmake -S "$DEV/llama.cpp" -B "$DEV/llama-build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
        -DGGML_CUDA=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
        -DBUILD_SHARED_LIBS=OFF &&
    cmake --build "$DEV/llama-build" --target llama-bench -j "$JOBS"
    echo "llama.cpp build rc $?"
) > "$O/llama_build.log" 2>&1 &
llama_pid=$!

# 2. omniserve's bench, forward pass only
stamp "bench_only compile"
OBJ="$DEV/bench_only_obj"
mkdir -p "$OBJ"
SRCS="tools/bench_only/bench_only.c src/cli/bench.c src/cli/bench_util.c src/cli/args.c
      llm/model.c llm/tokenizer.c llm/unicode.c $(ls llm/moe.c llm/deltanet.c llm/model_dev.c 2>/dev/null)
      $(ls src/core/*.c src/core/arch/x86/*.c | grep -v '/download\.c$')"
echo $SRCS | tr ' ' '\n' | grep . | xargs -P 8 -I{} sh -c \
    'o='"$OBJ"'/$(echo {} | tr / _).o; '"$CC"' -std=gnu11 -O2 -march=native -pthread -I. -Itools/bench_only -I'"$DEV"'/pcre2/include -w -c {} -o $o || echo "compile failed: {}"'
"$CC" -o "$DEV/bench_only" "$OBJ"/*.o "$DEV/pcre2/lib/libpcre2-8.a" -lm -pthread && stamp "bench_only built" || stamp "bench_only link failed"

# 3. the model
stamp "random_model"
[ -f "$M" ] || python3 tools/random_model --shape llama-3.2-1b --type q4_k_m \
    --vocab "$DEV/ggml-vocab-llama-bpe.gguf" -o "$M" 2>&1 | tr '\r' '\n' | grep -v "^writing" | tail -3
ls -la "$M"

stamp "waiting for llama.cpp"
[ "$LLAMA" = 1 ] && wait "$llama_pid"
tail -3 "$O/llama_build.log"
LB="$DEV/llama-build/bin/llama-bench"

# 4. the benchmarks, one at a time
cat /proc/loadavg
if [ -x "$DEV/bench_only" ]; then
    stamp "omniserve bench -t $THREADS"
    timeout 200 "$DEV/bench_only" -m "$M" -t "$THREADS" -p 1 -n "$N" --reps "$REPS" > "$O/omniserve.txt" 2> "$O/omniserve.err"
    echo "rc $?"; grep '^{' "$O/omniserve.txt" > "$O/omniserve.jsonl"; grep -E "^tg|bandwidth" "$O/omniserve.txt"
fi
cat /proc/loadavg
if [ -x "$LB" ]; then
    stamp "llama-bench -t $THREADS"
    timeout 200 "$LB" -m "$M" -t "$THREADS" -p 0 -n "$N" -r "$REPS" -o jsonl > "$O/llama.jsonl" 2> "$O/llama.err"
    echo "rc $?"; cat "$O/llama.jsonl" | cut -c1-300
fi
cat /proc/loadavg

# 5. the table
stamp "table"
python3 - "$O" <<'PY' | tee "$O/table.md"
import json, os, sys
o = sys.argv[1]
def lines(p):
    try:
        return [json.loads(l) for l in open(os.path.join(o, p)) if l.startswith("{")]
    except OSError:
        return []
ours = {r["threads"]: r for r in lines("omniserve.jsonl")}
peer = {r["n_threads"]: r for r in lines("llama.jsonl") if r.get("n_gen")}
print("| threads | omniserve tg64 tok/s | scaling | bandwidth GB/s | bandwidth_fraction | llama.cpp tg64 tok/s | scaling | ratio |")
print("|---|---|---|---|---|---|---|---|")
for t in sorted(set(ours) | set(peer)):
    a, b = ours.get(t), peer.get(t)
    ta = a["tg_tok_s"] if a else 0
    tb = b["avg_ts"] if b else 0
    a1 = ours.get(1, {}).get("tg_tok_s", 0)
    b1 = peer.get(1, {}).get("avg_ts", 0)
    f = lambda x: "%.1f" % x if x else "-"
    print("| %d | %s | %s | %s | %s | %s | %s | %s |" % (
        t, f(ta), "%.2fx" % (ta / a1) if ta and a1 else "-",
        f(a["bandwidth_gb_s"]) if a else "-", "%.3f" % a["bandwidth_fraction"] if a else "-",
        f(tb), "%.2fx" % (tb / b1) if tb and b1 else "-", "%.2f" % (ta / tb) if ta and tb else "-"))
PY
stamp "done"
