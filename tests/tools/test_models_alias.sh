#!/bin/sh
# test_models_alias.sh - model aliases against tests/tools/fake_hub.py on
# 127.0.0.1: `pull ALIAS:QUANT` fetches the catalog repo's file of that
# quantization, `pull ALIAS` the one that fits this machine, the cache
# answers an alias offline, bad quantizations and aliases are clear errors,
# `models` lists the cache, `recommend --json` is sane, and `serve -m ALIAS`
# downloads and serves under the alias's name.
set -u
: "${OMNI:=build/omniserve}" "${PYTHON:=/usr/bin/python3}" "${TMP:=/tmp}"
[ -x "$OMNI" ] || { echo "no $OMNI"; exit 77; }
fails=0
export no_proxy=127.0.0.1 NO_PROXY=127.0.0.1
fail() { echo "FAIL: $*"; fails=$((fails+1)); }
D="$TMP/models_alias"
rm -rf "$D" && mkdir -p "$D"
R=unsloth/Qwen3-0.6B-GGUF
head -c 300000 /dev/urandom >"$D/q8"
head -c 200000 /dev/urandom >"$D/q4"
G="$D/stories.gguf"
if [ -f ../shared/models/stories260K/stories260K.bin ] &&
    tools/llama2c_to_gguf ../shared/models/stories260K/stories260K.bin \
        ../shared/models/stories260K/tok512.bin "$G" >/dev/null 2>&1; then
    cp "$G" "$D/q8"   # a model that loads, for serve -m ALIAS
fi
"$PYTHON" tests/tools/fake_hub.py --port-file "$D/ports" --log "$D/log" \
    --entry $R Qwen3-0.6B-Q8_0.gguf "$D/q8" --entry $R Qwen3-0.6B-Q4_K_M.gguf "$D/q4" \
    --entry $R mmproj-Q8_0.gguf "$D/q4" --entry $R README.md "$D/q4" &
HUB_PID=$!
trap 'kill $HUB_PID 2>/dev/null; wait $HUB_PID 2>/dev/null' EXIT
for _ in $(seq 50); do [ -f "$D/ports" ] && break; sleep 0.1; done
read -r HUB CDN <"$D/ports" || { echo "FAIL: fake hub did not start"; exit 1; }
export HF_ENDPOINT="http://127.0.0.1:$HUB" OMNISERVE_CACHE="$D/cache"
pull() { "$OMNI" pull "$@" >"$D/out" 2>"$D/err"; rc=$?; }

# --- ALIAS:QUANT: that file of the catalog's repo ---
pull qwen3-0.6b:Q4_K_M
[ $rc -eq 0 ] || { fail "pull qwen3-0.6b:Q4_K_M exited $rc"; cat "$D/err"; }
[ "$(cat "$D/out")" = "$D/cache/$R/Qwen3-0.6B-Q4_K_M.gguf" ] || fail "path '$(cat "$D/out")'"
cmp -s "$D/cache/$R/Qwen3-0.6B-Q4_K_M.gguf" "$D/q4" || fail "Q4_K_M file differs"
grep -q "qwen3-0.6b:Q4_K_M is $R, Q4_K_M" "$D/err" || fail "no alias line: $(cat "$D/err")"

# --- ALIAS: the quantization that fits this machine (Q8_0 needs < 2 GB) ---
pull qwen3-0.6b
[ $rc -eq 0 ] && cmp -s "$(cat "$D/out")" "$D/q8" || { fail "pull qwen3-0.6b: rc $rc"; cat "$D/err"; }

# --- a cached alias needs no network ---
HF_HUB_OFFLINE=1 pull qwen3-0.6b:Q4_K_M
[ $rc -eq 0 ] || { fail "offline cached alias: rc $rc"; cat "$D/err"; }
HF_HUB_OFFLINE=1 pull qwen3-0.6b:Q6_K
[ $rc -eq 1 ] || fail "offline alias without the file: rc $rc"

# --- errors: a quantization the repo lacks, one nobody knows ---
pull qwen3-0.6b:Q6_K
[ $rc -ne 0 ] && grep -q "has no Q6_K file" "$D/err" || { fail "missing quant: rc $rc"; cat "$D/err"; }
pull qwen3-0.6b:Q9_9
[ $rc -eq 2 ] && grep -q "unknown quantization" "$D/err" || { fail "unknown quant: rc $rc"; cat "$D/err"; }

# --- models: the cache, with aliases ---
"$OMNI" models --json >"$D/models.json" || fail "models exited $?"
"$PYTHON" - "$D/models.json" "$R" <<'PY' || fail "models --json"
import json, sys
d = json.load(open(sys.argv[1]))
files = sorted(m["file"] for m in d["models"])
assert files == ["Qwen3-0.6B-Q4_K_M.gguf", "Qwen3-0.6B-Q8_0.gguf"], files
assert all(m["repo"] == sys.argv[2] and m["alias"] == "qwen3-0.6b" for m in d["models"]), d
assert d["bytes"] == sum(m["bytes"] for m in d["models"]) > 0
PY

# --- recommend: what fits 16 GiB, speed from the bandwidth given ---
"$OMNI" recommend --ram 16 --ctx 4096 --bandwidth 10 --json >"$D/rec.json" || fail "recommend exited $?"
"$PYTHON" - "$D/rec.json" <<'PY' || fail "recommend --json"
import json, sys
d = json.load(open(sys.argv[1]))
by = {m["alias"]: m for m in d["models"]}
q = by["qwen2.5-0.5b"]
assert q["fits"] and q["quant"] == "Q8_0" and q["supported"], q
assert abs(q["tok_s_est"] - 0.85 * 10e9 / (0.49e9 * 8.5 / 8)) < 0.2, q
big = by["qwen3-14b"]
assert big["need_bytes"] <= d["usable_bytes"] < 16 * 2**30, big
assert all(m["supported"] for m in d["models"]), "unsupported listed without --all"
assert all(m["need_bytes"] <= d["usable_bytes"] for m in d["models"] if m["fits"])
assert all(m["need_bytes"] > d["usable_bytes"] for m in d["models"] if not m["fits"] and "quant" in m)
PY
"$OMNI" recommend --ram abc >/dev/null 2>&1; [ $? -eq 2 ] || fail "recommend --ram abc"

# --- serve -m ALIAS: downloaded, served as the alias ---
if [ -f "$G" ]; then
    rm -rf "$D/cache"
    port=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    "$OMNI" serve -m qwen3-0.6b:Q8_0 --port "$port" >"$D/serve.log" 2>&1 &
    spid=$!
    "$PYTHON" - "$port" >"$D/serve.out" <<'PY' || fail "serve -m alias: $(cat "$D/serve.out")"
import json, sys, time, urllib.request
base = "http://127.0.0.1:%s" % sys.argv[1]
for _ in range(300):
    try:
        with urllib.request.urlopen(base + "/health", timeout=5) as r:
            if json.loads(r.read()).get("status") == "ok":
                break
    except OSError:
        pass
    time.sleep(0.1)
with urllib.request.urlopen(base + "/v1/models", timeout=5) as r:
    ids = [m["id"] for m in json.loads(r.read())["data"]]
print(ids)
assert "qwen3-0.6b:Q8_0" in ids, ids
PY
    kill "$spid"; wait "$spid" 2>/dev/null
    grep -q "qwen3-0.6b:Q8_0 is $R, Q8_0" "$D/serve.log" || { fail "serve alias line"; cat "$D/serve.log"; }
    cmp -s "$D/cache/$R/Qwen3-0.6B-Q8_0.gguf" "$G" || fail "serve did not cache the alias's file"
else
    echo "note: no stories260K: serve -m ALIAS skipped"
fi
[ $fails -eq 0 ]
