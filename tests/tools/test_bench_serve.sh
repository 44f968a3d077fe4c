#!/bin/sh
# test_bench_serve.sh - `omniserve bench-serve` against `omniserve serve` with
# the stories260K model on 127.0.0.1: JSON levels with every key and no
# errors (keep-alive and fresh connections, plain and streaming), the
# HTTP-vs-in-process pairs with -m (same token counts), idle SSE streams held
# behind --max-seqs 1 with keep-alive comments, the human table, bad arguments.
set -u
: "${OMNI:=build/omniserve}" "${PYTHON:=/usr/bin/python3}" "${TMP:=/tmp}"
[ -x "$OMNI" ] || { echo "no $OMNI"; exit 77; }
[ -f ../shared/models/stories260K/stories260K.bin ] || { echo "no stories260K"; exit 77; }
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }
G="$TMP/bench_serve.gguf"
tools/llama2c_to_gguf ../shared/models/stories260K/stories260K.bin \
    ../shared/models/stories260K/tok512.bin "$G" >/dev/null 2>&1 || { echo "FAIL: convert"; exit 1; }
port=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$OMNI" serve -m "$G" --port "$port" --threads 1 --max-seqs 1 --sse-keepalive 0.1 \
    >"$TMP/bs_serve.log" 2>&1 &
spid=$!
trap 'kill $spid 2>/dev/null' EXIT
for _ in $(seq 100); do
    "$PYTHON" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/health')" \
        2>/dev/null && break
    sleep 0.1
done
U="http://127.0.0.1:$port"

# --- JSON levels and the overhead pairs ---
bs() { "$OMNI" bench-serve --url "$U" --timeout 60 "$@"; }
{ bs --concurrency 1 --requests 4 --max-tokens 4 --prompt-tokens 8 --json -m "$G" --threads 1 \
      --new-connections &&
  bs --concurrency 1,3 --requests 6 --max-tokens 4 --prompt-tokens 8 --json --stream; } >"$TMP/bs.out" 2>"$TMP/bs.err" || { fail "bench-serve exited $?"; cat "$TMP/bs.err"; }
"$PYTHON" - "$TMP/bs.out" <<'PY' || fail "JSON lines"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]).read().splitlines()]
bad = []
modes = [(j["mode"], j.get("concurrency"), j.get("stream")) for j in lines]
want = [("level", 1, False), ("overhead", None, False), ("level", 1, True), ("level", 3, True)]
if modes != want:
    bad.append("modes %r, want %r" % (modes, want))
for j in lines:
    if j["mode"] == "level":
        keys = ["req_s", "tok_s", "latency_ms_p50", "latency_ms_p95", "latency_ms_p99"]
        if j["stream"]:
            keys += ["ttft_ms_p50", "ttft_ms_p95", "ttft_ms_p99"]
        if j["errors"] != 0 or j["requests"] not in (4, 6):
            bad.append("level %r" % j)
    else:
        keys = ["http_ms_p50", "engine_ms_p50"]
        if j["pairs"] != 4 or j["errors"] or j["token_mismatches"]:
            bad.append("overhead %r" % j)
        if not isinstance(j.get("overhead_ms_p50"), (int, float)):
            bad.append("overhead_ms_p50 missing")
    for k in keys:
        if not isinstance(j.get(k), (int, float)) or j[k] <= 0:
            bad.append("%s %s: %r" % (j["mode"], k, j.get(k)))
for b in bad:
    print("  " + b)
sys.exit(1 if bad else 0)
PY

# --- idle streams queued behind --max-seqs 1 ---
bs --idle-streams 32 --hold 2 --max-tokens 400 --prompt-tokens 8 --json >"$TMP/bs.out" 2>"$TMP/bs.err" \
    || { fail "idle streams exited $?"; cat "$TMP/bs.err"; }
"$PYTHON" - "$TMP/bs.out" <<'PY' || fail "idle streams JSON"
import json, sys
j = json.loads(open(sys.argv[1]).read())
ok = (j["mode"] == "idle_streams" and j["streams"] == 32 and j["opened"] == 32 and
      j["errors"] == 0 and j["keepalive_comments"] > 0 and j["healthy_after"] is True)
print(j)
sys.exit(0 if ok else 1)
PY

# --- the table ---
bs --concurrency 2 --requests 2 --max-tokens 2 --prompt-tokens 4 >"$TMP/bs.out" 2>&1 || fail "table run exited $?"
grep -q "lat p50" "$TMP/bs.out" && grep -Eq "^ +2 +0 " "$TMP/bs.out" || { fail "table"; cat "$TMP/bs.out"; }

# --- errors ---
bad() { # bad RC TEXT ARGS...
    rc_want=$1; text=$2; shift 2
    "$OMNI" bench-serve "$@" >"$TMP/bs.out" 2>&1; rc=$?
    [ $rc -eq "$rc_want" ] || fail "bench-serve $*: exit $rc, want $rc_want"
    grep -q -- "$text" "$TMP/bs.out" || { fail "bench-serve $*: no '$text'"; cat "$TMP/bs.out"; }
}
bad 2 "required" --concurrency 1
bad 2 "only http://127.0.0.1" --url http://10.1.2.3:8000
bad 2 "only http://127.0.0.1" --url https://127.0.0.1:8000
bad 2 "concurrency" --url "$U" --concurrency 1,x
bad 2 "unknown option" --url "$U" --frobnicate 1
bad 1 "tokenize" --url http://127.0.0.1:1 --requests 1
bad 1 "No such file" --url "$U" --concurrency 1 --requests 1 -m "$TMP/missing.gguf"
kill $spid; wait $spid 2>/dev/null
[ $fails -eq 0 ]
