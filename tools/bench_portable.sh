#!/bin/sh
# bench_portable.sh - the portable build against a NATIVE=1 build and a
# baseline binary, same run, interleaved, CPU time (user + sys of the whole
# process: the shared machines are loaded, so wall time says little).
#
#   tools/bench_portable.sh BASE_BIN NATIVE_BIN PORTABLE_BIN LLM.gguf WHISPER.bin AUDIO [REPS]
#
# Per binary and workload: the median CPU seconds over REPS (default 3) and
# the tool's own figure (pp/tg tok/s, encoder ms, decoder ms per token);
# one JSON line per (workload, binary), then ratios of CPU time against the
# first binary (the baseline): < 1 is faster. One thread everywhere, so that
# CPU time is the work done.
set -eu
[ $# -ge 6 ] || { sed -n 2,13p "$0"; exit 2; }
BASE=$1 NATIVE=$2 PORT=$3 LLM=$4 WHISPER=$5 AUDIO=$6 REPS=${7:-3}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

# run NAME BIN WORKLOAD: append "cpu_s figure" to $OUT/WORKLOAD.NAME
run() {
    name=$1 bin=$2 w=$3
    # newer benches measure the read bandwidth first: not part of the work
    nobw=$("$bin" bench --help 2>&1 | grep -q -e --no-bandwidth && echo --no-bandwidth || true)
    case $w in
    pp) args="bench -m $LLM --threads 1 --reps 1 -p 128 -n 1 $nobw" ;;
    tg) args="bench -m $LLM --threads 1 --reps 1 -p 1 -n 32 $nobw" ;;
    stt) args="bench-stt -m $WHISPER --file $AUDIO -t 1 --reps 1 --json" ;;
    esac
    # shellcheck disable=SC2086
    /usr/bin/time -f "%U %S" -o "$OUT/time" "$bin" $args > "$OUT/log" 2>&1 || {
        echo "bench_portable: $name $w failed:" >&2; tail -5 "$OUT/log" >&2; exit 1; }
    cpu=$(awk '{ printf "%.3f", $1 + $2 }' "$OUT/time")
    case $w in
    pp) fig=$(grep -o '"pp_tok_s": [0-9.]*' "$OUT/log" | awk '{ print $2 }') ;;
    tg) fig=$(grep -o '"tg_tok_s": [0-9.]*' "$OUT/log" | awk '{ print $2 }') ;;
    stt) fig=$(grep -o '"encoder_ms": *[0-9.]*' "$OUT/log" | awk -F: '{ print $2 + 0 }')/$(grep -o '"decoder_ms_per_token": *[0-9.]*' "$OUT/log" | awk -F: '{ print $2 + 0 }') ;;
    esac
    echo "$cpu $fig" >> "$OUT/$w.$name"
}

for r in $(seq "$REPS"); do
    for w in pp tg stt; do
        run base "$BASE" $w
        run native "$NATIVE" $w
        run portable "$PORT" $w
    done
done

median() { sort -n | awk '{ v[NR] = $0 } END { print v[int((NR + 1) / 2)] }'; }
for w in pp tg stt; do
    b=$(cut -d' ' -f1 "$OUT/$w.base" | median)
    for name in base native portable; do
        m=$(cut -d' ' -f1 "$OUT/$w.$name" | median)
        figs=$(cut -d' ' -f2 "$OUT/$w.$name" | tr '\n' ' ')
        echo "{\"workload\": \"$w\", \"binary\": \"$name\", \"cpu_s_median\": $m, \"reps\": $REPS, \"figures\": \"$figs\", \"cpu_ratio_vs_base\": $(awk -v m="$m" -v b="$b" 'BEGIN { printf "%.3f", m / b }')}"
    done
done
