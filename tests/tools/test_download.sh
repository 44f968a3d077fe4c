#!/bin/sh
# test_download.sh - `omniserve pull` and `serve --hf-repo` against
# tests/tools/fake_hub.py on 127.0.0.1 (never the real hub): redirect to the
# CDN, token to the hub only, cache hit without network, resume inside one run
# and across runs, a server that ignores Range, SHA-256 and size mismatches,
# hub errors, file choice, offline mode, no network, and make run's paths.
set -u
: "${OMNI:=build/omniserve}" "${PYTHON:=/usr/bin/python3}" "${TMP:=/tmp}"
[ -x "$OMNI" ] || { echo "no $OMNI"; exit 77; }
fails=0
export no_proxy=127.0.0.1 NO_PROXY=127.0.0.1  # the fake hub is local, never a proxy's
fail() { echo "FAIL: $*"; fails=$((fails+1)); }
D="$TMP/download"
rm -rf "$D" && mkdir -p "$D"
HUB_PID=
stop_hub() { [ -n "$HUB_PID" ] && kill "$HUB_PID" 2>/dev/null && wait "$HUB_PID" 2>/dev/null; HUB_PID=; }
trap 'stop_hub' EXIT
# start_hub ARGS...: fake hub with the test files; sets HUB_PID, HUB, CDN
start_hub() {
    stop_hub
    rm -f "$D/ports" "$D/log"
    "$PYTHON" tests/tools/fake_hub.py --port-file "$D/ports" --log "$D/log" \
        --entry t/one-GGUF model-q4_k_m.gguf "$D/blob" \
        --entry t/many-GGUF a-q8_0.gguf "$D/blob" --entry t/many-GGUF b-Q4_K_M.gguf "$D/blob2" \
        --entry t/many-GGUF README.md "$D/blob2" \
        --entry t/nopick-GGUF a-q8_0.gguf "$D/blob" --entry t/nopick-GGUF b-f16.gguf "$D/blob" \
        "$@" &
    HUB_PID=$!
    for _ in $(seq 50); do [ -f "$D/ports" ] && break; sleep 0.1; done
    read -r HUB CDN <"$D/ports" || { echo "FAIL: fake hub did not start"; exit 1; }
}
head -c 1000003 /dev/urandom >"$D/blob"
head -c 5000 /dev/urandom >"$D/blob2"
# pull ARGS...: with the fake hub as endpoint and a private cache; rc in $rc
pull() {
    HF_ENDPOINT="http://127.0.0.1:$HUB" OMNISERVE_CACHE="$D/cache" "$OMNI" pull "$@" \
        >"$D/out" 2>"$D/err"
    rc=$?
}
F="$D/cache/t/one-GGUF/model-q4_k_m.gguf"
nlog() { [ -f "$D/log" ] && wc -l <"$D/log" || echo 0; }

# --- download through the redirect, token to the hub only ---
start_hub --token sekrit
HF_TOKEN=sekrit pull t/one-GGUF:model-q4_k_m.gguf
[ $rc -eq 0 ] || { fail "pull exited $rc"; cat "$D/err"; }
[ "$(cat "$D/out")" = "$F" ] || fail "stdout '$(cat "$D/out")', want $F"
cmp -s "$F" "$D/blob" || fail "downloaded file differs"
[ -e "$F.part" ] && fail ".part left behind"
grep -q "SHA-256 verified" "$D/err" || fail "no 'SHA-256 verified'"
"$PYTHON" - "$D/log" <<'PY' || fail "request log"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
bad = []
hub = [r for r in recs if r["server"] == "hub"]
cdn = [r for r in recs if r["server"] == "cdn"]
if not hub or hub[0]["path"] != "/t/one-GGUF/resolve/main/model-q4_k_m.gguf":
    bad.append("no resolve request on the hub: %r" % hub)
if any(r["authorization"] != "Bearer sekrit" for r in hub):
    bad.append("hub request without the token")
if not cdn or any(r["authorization"] for r in cdn):
    bad.append("token sent to the CDN (or no CDN request): %r" % cdn)
for b in bad:
    print("  " + b)
sys.exit(1 if bad else 0)
PY
pull t/one-GGUF:model-q4_k_m.gguf
[ $rc -eq 0 ] && [ "$(cat "$D/out")" = "$F" ] || fail "the cached file was not used"
n0=$(nlog)
HF_TOKEN=sekrit pull hf://t/one-GGUF/model-q4_k_m.gguf
[ $rc -eq 0 ] || fail "cached pull exited $rc"
[ "$(nlog)" -eq "$n0" ] || fail "a cached file went to the network"
rm -f "$F"
pull t/one-GGUF:model-q4_k_m.gguf
[ $rc -eq 1 ] && grep -q "HF_TOKEN" "$D/err" || { fail "401 without HF_TOKEN: rc $rc"; cat "$D/err"; }

# --- resume inside one run (connection dropped mid-file) ---
start_hub --drop-after 300000 --drop-times 1
pull t/one-GGUF:model-q4_k_m.gguf --retries 3
[ $rc -eq 0 ] || { fail "resume in one run: exit $rc"; cat "$D/err"; }
cmp -s "$F" "$D/blob" || fail "resumed file differs"
grep -q '"range": "bytes=300000-"' "$D/log" || fail "no Range request after the drop"

# --- resume across runs: the first run gives up, the second continues ---
rm -f "$F"
start_hub --drop-after 400000 --drop-times 1
pull t/one-GGUF:model-q4_k_m.gguf --retries 0
[ $rc -eq 1 ] || fail "--retries 0 with a drop: exit $rc"
[ "$(wc -c <"$F.part" 2>/dev/null)" = 400000 ] || fail ".part should hold 400000 bytes"
[ -e "$F" ] && fail "an incomplete file in the cache"
pull t/one-GGUF:model-q4_k_m.gguf
[ $rc -eq 0 ] || { fail "second run exit $rc"; cat "$D/err"; }
grep -q "resuming at 400000" "$D/err" || fail "no 'resuming' note"
grep -q '"range": "bytes=400000-"' "$D/log" || fail "second run did not resume"
cmp -s "$F" "$D/blob" || fail "file resumed across runs differs"

# --- a server that ignores Range: start over, still correct ---
rm -f "$F"
head -c 123456 "$D/blob" >"$F.part"
start_hub --no-range
pull t/one-GGUF:model-q4_k_m.gguf
[ $rc -eq 0 ] || { fail "no-range server: exit $rc"; cat "$D/err"; }
cmp -s "$F" "$D/blob" || fail "file from a no-range server differs"
grep -q "ignored the resume range" "$D/err" || fail "no note about the ignored range"

# --- a .part with wrong bytes: the SHA-256 catches it, nothing is cached ---
rm -f "$F"
head -c 5000 /dev/zero >"$F.part"
start_hub
pull t/one-GGUF:model-q4_k_m.gguf
[ $rc -eq 1 ] && grep -q "SHA-256 mismatch" "$D/err" || { fail "corrupt .part: rc $rc"; cat "$D/err"; }
[ -e "$F" ] || [ -e "$F.part" ] && fail "corrupt download kept"

# --- the hub announces another SHA-256 / size ---
start_hub --bad-sha
pull t/one-GGUF:model-q4_k_m.gguf
[ $rc -eq 1 ] && grep -q "SHA-256 mismatch" "$D/err" || { fail "bad sha: rc $rc"; cat "$D/err"; }
[ -e "$F" ] && fail "file with a wrong SHA-256 cached"
start_hub --bad-size
pull t/one-GGUF:model-q4_k_m.gguf
[ $rc -eq 1 ] && grep -q "1000004" "$D/err" || { fail "bad size: rc $rc"; cat "$D/err"; }
[ -e "$F" ] && fail "file with a wrong size cached"

# --- a redirect on the hub itself (relative Location) ---
start_hub --same-origin
pull t/one-GGUF:model-q4_k_m.gguf
[ $rc -eq 0 ] && cmp -s "$F" "$D/blob" || { fail "same-origin redirect: rc $rc"; cat "$D/err"; }
grep -q "SHA-256 verified" "$D/err" || fail "same-origin: x-linked-etag lost across the hop"

# --- choosing the file; hub errors ---
pull t/many-GGUF
[ $rc -eq 0 ] && [ "$(cat "$D/out")" = "$D/cache/t/many-GGUF/b-Q4_K_M.gguf" ] \
    || { fail "pick Q4_K_M: rc $rc, $(cat "$D/out")"; cat "$D/err"; }
pull t/one-GGUF
[ $rc -eq 0 ] && [ "$(cat "$D/out")" = "$F" ] || fail "pick the only GGUF: rc $rc"
pull t/nopick-GGUF
[ $rc -eq 2 ] && grep -q "a-q8_0.gguf, b-f16.gguf" "$D/err" || { fail "ambiguous: rc $rc"; cat "$D/err"; }
pull t/one-GGUF:missing.gguf
[ $rc -eq 1 ] && grep -q "not found" "$D/err" || { fail "missing file: rc $rc"; cat "$D/err"; }
pull t/one-GGUF:model-q4_k_m.gguf --revision v2
[ $rc -eq 1 ] && grep -q "revision 'v2'" "$D/err" || { fail "missing revision: rc $rc"; cat "$D/err"; }
pull nobody/nothing:x.gguf
[ $rc -eq 1 ] && grep -q "Repository not found" "$D/err" || { fail "missing repo: rc $rc"; cat "$D/err"; }
for ref in noslash "a/b/../c.gguf" "../x:y.gguf" "a/b:../y.gguf" "hf://a/b" "a/b:c d.gguf"; do
    pull "$ref"
    [ $rc -eq 2 ] || fail "bad ref '$ref': exit $rc, want 2"
done

# --- offline, no network ---
HF_HUB_OFFLINE=1 pull t/one-GGUF:model-q4_k_m.gguf
[ $rc -eq 0 ] || fail "offline with the file cached: exit $rc"
HF_HUB_OFFLINE=1 pull t/one-GGUF:other.gguf
[ $rc -eq 1 ] && grep -q "HF_HUB_OFFLINE" "$D/err" || fail "offline without the file: rc $rc"
stop_hub
HUB=1 pull t/one-GGUF:other.gguf
[ $rc -eq 1 ] && grep -q "cannot reach" "$D/err" || { fail "no network: rc $rc"; cat "$D/err"; }

# --- make run's path: serve --hf-repo through tools/demo_run.sh ---
G="$TMP/download_stories.gguf"
if [ -f ../shared/models/stories260K/stories260K.bin ] &&
    tools/llama2c_to_gguf ../shared/models/stories260K/stories260K.bin \
        ../shared/models/stories260K/tok512.bin "$G" >/dev/null 2>&1; then
    start_hub --entry Qwen/Qwen2.5-0.5B-Instruct-GGUF qwen2.5-0.5b-instruct-q4_k_m.gguf "$G"
    # serve_check ENDPOINT CACHE: start make run's server, print /health and a chat answer
    serve_check() {
        port=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
        HF_ENDPOINT=$1 OMNISERVE_CACHE=$2 OMNI=$OMNI PORT=$port MODEL= sh tools/demo_run.sh \
            >"$D/serve.log" 2>&1 &
        spid=$!
        "$PYTHON" - "$port" >"$D/serve.out" <<'PY'
import json, sys, time, urllib.request, urllib.error
base = "http://127.0.0.1:%s" % sys.argv[1]
def get(path, body=None):
    req = urllib.request.Request(base + path, data=body and json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
for _ in range(300):
    try:
        st, h = get("/health")
        if st == 200:
            break
    except OSError:
        pass
    time.sleep(0.1)
print(json.dumps(h))
st, r = get("/v1/chat/completions",
            {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
print(st, json.dumps(r))
PY
        kill "$spid"; wait "$spid" 2>/dev/null
    }
    serve_check "http://127.0.0.1:$HUB" "$D/cache"
    grep -q '"status": "ok"' "$D/serve.out" && grep -q '^200 ' "$D/serve.out" \
        || { fail "make run with the fake hub"; cat "$D/serve.out" "$D/serve.log"; }
    cmp -s "$D/cache/Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_k_m.gguf" "$G" \
        || fail "make run did not cache the default model"
    stop_hub
    serve_check "http://127.0.0.1:1" "$D/cache"  # cached: no network needed
    grep -q '"status": "ok"' "$D/serve.out" || { fail "make run from the cache"; cat "$D/serve.log"; }
    serve_check "http://127.0.0.1:1" "$D/empty-cache"
    grep -q '"status": "no_model"' "$D/serve.out" && grep -q '^404 .*could not download' "$D/serve.out" \
        || { fail "make run without network: health/404"; cat "$D/serve.out"; }
    grep -q "omniserve serve -m path/to/model.gguf" "$D/serve.log" \
        || { fail "make run without network: no explanation"; cat "$D/serve.log"; }
else
    echo "note: no stories260K: make run checks skipped"
fi

[ $fails -eq 0 ]
