#!/bin/sh
# run.sh - run libFuzzer targets one after another (make fuzz / make fuzz-smoke).
#
#   sh tests/fuzz/run.sh [--smoke | --keep-going] [--seconds N] build-fuzz/fuzz_gguf ...
#
# Each target fuzzes for N seconds (default 10) with the -max_len below, on
# build-fuzz/corpus/<target>: seeded from tests/fuzz/corpus/<target> and kept
# between runs, so the committed corpus stays small. --smoke (CI) uses a fresh
# copy of the committed corpus instead, so every run first replays exactly the
# committed seeds, then mutates with a fixed random seed for a fixed number
# of runs ($FUZZ_SMOKE_RUNS, default 10000), not seconds: the same answer on
# any machine, however loaded. --keep-going (the long runs
# before a release) fuzzes in libFuzzer's fork mode, which goes on after a
# crash, leak or timeout, so one known bug does not hide the next. One line
# per target: executions, corpus size, result; the whole libFuzzer output is
# in build-fuzz/logs/<target>.log and each finding's input in
# build-fuzz/findings/. Exits 1 if any target found something.
# Run from the repository root (the API targets read tests/fixtures).

set -u
smoke=0
keep_going=0
seconds=10
while [ $# -gt 0 ]; do
    case "$1" in
        --smoke) smoke=1; shift ;;
        --keep-going) keep_going=1; shift ;;
        --seconds) seconds="$2"; shift 2 ;;
        *) break ;;
    esac
done
[ $# -gt 0 ] || { echo "usage: $0 [--smoke | --keep-going] [--seconds N] build-fuzz/fuzz_x ..." >&2; exit 2; }

# Largest input per target: a little above the biggest seed, small enough
# that each execution stays fast.
max_len() {
    case "$1" in
        fuzz_tokenizer) echo 1024 ;;
        fuzz_grammar | fuzz_json_schema | fuzz_multipart) echo 4096 ;;
        fuzz_gguf | fuzz_vad | fuzz_image | fuzz_audio | fuzz_template) echo 8192 ;;
        fuzz_api_*) echo 8192 ;;
        fuzz_vocab | fuzz_whisper | fuzz_mmproj) echo 16384 ;;
        *) echo 4096 ;;
    esac
}

root=build-fuzz
mkdir -p "$root/logs" "$root/findings"
status=0
total=0
for bin in "$@"; do
    name=$(basename "$bin")
    seeds="tests/fuzz/corpus/$name"
    if [ "$smoke" = 1 ]; then
        corpus="$root/smoke/$name"
        rm -rf "$corpus"
    else
        corpus="$root/corpus/$name"
    fi
    mkdir -p "$corpus"
    [ -d "$seeds" ] && cp -n "$seeds"/* "$corpus"/ 2>/dev/null
    log="$root/logs/$name.log"
    mode=""
    limit="-max_total_time=$seconds"
    # The smoke run (CI) must give the same answer on a fast and a slow
    # machine: a fixed seed and a fixed number of runs, the time only as a
    # bound that a healthy run does not reach.
    [ "$smoke" = 1 ] && mode="-seed=1" && limit="-runs=${FUZZ_SMOKE_RUNS:-10000} -max_total_time=$seconds"
    [ "$keep_going" = 1 ] && mode="-fork=1 -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1"
    marker="$root/findings/.start-$name"
    touch "$marker"
    # -rss_limit_mb / -malloc_limit_mb: a single input may not take more than
    # 2 GB; -timeout: one input may not run longer than 10 s (a hang).
    ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" \
    UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}" \
        "$bin" $mode $limit -max_len="$(max_len "$name")" -rss_limit_mb=2048 \
        -malloc_limit_mb=2048 -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$root/findings/$name-" "$corpus" >"$log" 2>&1
    rc=$?
    # plain mode prints the total at exit; fork mode a running count per job
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    [ -n "$execs" ] || execs=$(sed -n 's/^#\([0-9][0-9]*\): cov:.*/\1/p' "$log" | tail -n 1)
    size=$(ls "$corpus" | wc -l)
    found=$(find "$root/findings" -name "$name-*" -newer "$marker" | sort)
    rm -f "$marker"
    if [ "$rc" = 0 ] && [ -z "$found" ]; then
        result=ok
    else
        status=1
        kind=$(grep -a -m1 -o -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer|UndefinedBehaviorSanitizer)[^ ]*( [a-z-]+)?|runtime error: .*|fuzz: .*' "$log" | head -n 1)
        n_found=$(printf '%s\n' "$found" | grep -c .)
        result="FINDING: $n_found input(s), first: ${kind:-see log} ($(printf '%s\n' "$found" | head -n 1)); log $log"
    fi
    printf '%-24s %10s execs  %5s inputs  %s\n' "$name" "${execs:-?}" "$size" "$result"
    total=$((total + ${execs:-0}))
done
printf '%-24s %10s execs\n' total "$total"
exit $status
