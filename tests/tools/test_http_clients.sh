#!/bin/sh
# test_http_clients.sh - the HTTP behaviour agent clients rely on, against
# `omniserve serve` on raw sockets and curl (stories260K, 512-token context):
# - HEAD on every GET route (/, /health, /livez, /metrics, /v1/models,
#   /v1/models/{id}, /web/info, /v1/audio/voices) answers the GET's status and
#   headers with no body, so that the next response on the same keep-alive
#   connection parses (Claude Code sends HEAD / first);
# - max_tokens 0 is a 400 on chat completions, completions and messages;
#   max_tokens past the context is clamped (the answer ends at the context's
#   end, finish_reason length) and with --max-tokens-policy reject is a 400;
# - without a model, generation is 404 model_not_found without Retry-After;
# - a system turn mid-conversation on a template that refuses it is folded
#   into the system prompt on /v1/messages;
# - a bad --host, an address of another machine or a port in use: exit
#   status 1 with the reason, and no "listening" line.
set -u
: "${OMNI:=build/omniserve}" "${PYTHON:=/usr/bin/python3}" "${TMP:=/tmp}"
[ -x "$OMNI" ] || { echo "no $OMNI"; exit 77; }
[ -f ../shared/models/stories260K/stories260K.bin ] || { echo "no stories260K"; exit 77; }
D=$(mktemp -d "$TMP/http_clients.XXXXXX")
G="$D/stories260K.gguf"
tools/llama2c_to_gguf ../shared/models/stories260K/stories260K.bin \
    ../shared/models/stories260K/tok512.bin "$G" >/dev/null 2>&1 || { echo "FAIL: convert"; exit 1; }
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }
freeport() { "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=""
trap 'for p in $pids; do kill $p 2>/dev/null; done; rm -rf "$D"' EXIT
# start NAME ARGS...: a server in the background; its port in $port
start() {
    name=$1; shift
    port=$(freeport)
    "$OMNI" serve --port "$port" --threads 1 --kv-memory 16M "$@" >"$D/$name.log" 2>&1 &
    pids="$pids $!"
    i=0
    until curl -s -o /dev/null "http://127.0.0.1:$port/livez"; do
        i=$((i+1)); [ $i -gt 200 ] && { fail "$name did not start"; cat "$D/$name.log"; return 1; }
        sleep 0.05
    done
    until [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" != 503 ]; do
        i=$((i+1)); [ $i -gt 400 ] && { fail "$name did not load"; return 1; }
        sleep 0.05
    done
}
# post PORT PATH JSON: "STATUS BODY"
post() {
    curl -s -w '\n%{http_code}' -H 'content-type: application/json' -d "$3" "http://127.0.0.1:$1$2" \
        | "$PYTHON" -c 'import sys; t=sys.stdin.read().rsplit("\n",1); print(t[1], t[0])'
}

# --- HEAD on every GET route, on one keep-alive connection ---
start model -m "$G" --served-model-name s260 || exit 1
mport=$port
"$PYTHON" - "$mport" <<'PY' || fail "HEAD routes"
import socket, sys
port = int(sys.argv[1])
routes = ["/", "/health", "/livez", "/metrics", "/v1/models", "/v1/models/s260", "/web/info",
          "/v1/audio/voices"]
s = socket.create_connection(("127.0.0.1", port), timeout=30)
f = s.makefile("rb")
def req(method, path):
    s.sendall(b"%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % (method.encode(), path.encode()))
    status = int(f.readline().split()[1])
    hdrs = {}
    while True:
        l = f.readline()
        if l in (b"\r\n", b""):
            break
        k, v = l.decode().split(":", 1)
        hdrs[k.strip().lower()] = v.strip()
    return status, hdrs
bad = 0
for path in routes:
    gs, gh = req("GET", path)
    body = f.read(int(gh.get("content-length", "0")))
    hs, hh = req("HEAD", path)
    # no body follows a HEAD answer: the next request's status line must be next
    if hs != gs or hh.get("content-type") != gh.get("content-type"):
        print("HEAD %s: %d %s, GET: %d %s" % (path, hs, hh.get("content-type"), gs, gh.get("content-type")))
        bad += 1
    if "content-length" in hh and int(hh["content-length"]) != len(body) and path not in ("/metrics",):
        print("HEAD %s: content-length %s, GET body %d" % (path, hh["content-length"], len(body)))
        bad += 1
# the connection is still in step: a GET after the HEADs answers its own body
st, h = req("GET", "/livez")
b = f.read(int(h["content-length"]))
if st != 200 or b'"alive"' not in b:
    print("after the HEADs: %d %r" % (st, b))
    bad += 1
sys.exit(1 if bad else 0)
PY

# --- max_tokens: 0 is a 400; past the context clamped ---
msg='"messages":[{"role":"user","content":"Once upon a time"}]'
for route in /v1/chat/completions /v1/completions /v1/messages; do
    body="{$msg,\"max_tokens\":0}"
    [ $route = /v1/completions ] && body='{"prompt":"Once upon a time","max_tokens":0}'
    r=$(post "$mport" $route "$body")
    case "$r" in "400 "*max_tokens*) ;; *) fail "$route max_tokens 0: $r" ;; esac
done
r=$(post "$mport" /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":0}')
case "$r" in "400 "*max_completion_tokens*) ;; *) fail "max_completion_tokens 0: $r" ;; esac
r=$(post "$mport" /v1/chat/completions "{$msg,\"max_tokens\":100000,\"temperature\":0}")
printf "%s\n" "$r" | "$PYTHON" -c '
import json, sys
st, body = sys.stdin.read().split(" ", 1)
j = json.loads(body)
u = j["usage"]
ok = st == "200" and j["choices"][0]["finish_reason"] == "length" and u["prompt_tokens"] + u["completion_tokens"] == 512
sys.exit(0 if ok else 1)' || fail "chat max_tokens 100000 not clamped to the context: $r"
r=$(post "$mport" /v1/messages "{$msg,\"max_tokens\":64000,\"temperature\":0}")
printf "%s\n" "$r" | "$PYTHON" -c '
import json, sys
st, body = sys.stdin.read().split(" ", 1)
j = json.loads(body)
u = j["usage"]
ok = st == "200" and j["stop_reason"] == "model_context_window_exceeded" and u["input_tokens"] + u["cache_read_input_tokens"] + u["output_tokens"] == 512
sys.exit(0 if ok else 1)' || fail "messages max_tokens 64000 not clamped to the context: $r"

start reject -m "$G" --max-tokens-policy reject || exit 1
r=$(post "$port" /v1/messages "{$msg,\"max_tokens\":64000}")
case "$r" in "400 "*"maximum context length is 512"*) ;; *) fail "reject policy: $r" ;; esac
r=$(post "$port" /v1/chat/completions "{$msg,\"max_tokens\":16}")
case "$r" in "200 "*) ;; *) fail "reject policy, a fitting request: $r" ;; esac
"$OMNI" serve --max-tokens-policy sometimes --port "$port" >"$D/badpol.log" 2>&1
[ $? -eq 2 ] && grep -q "clamp or reject" "$D/badpol.log" || fail "bad --max-tokens-policy: $(cat "$D/badpol.log")"

# --- no model: 404 model_not_found, not retried ---
start nomodel --no-tts || exit 1
for route in /v1/chat/completions /v1/messages; do
    hdr=$(curl -s -D - -o "$D/nm.json" -H 'content-type: application/json' \
        -d "{$msg,\"max_tokens\":4}" "http://127.0.0.1:$port$route")
    echo "$hdr" | head -1 | grep -q " 404" || fail "no model $route: $hdr"
    echo "$hdr" | grep -qi "^retry-after" && fail "no model $route: Retry-After sent"
    grep -q "no model is loaded" "$D/nm.json" || fail "no model $route: $(cat "$D/nm.json")"
done
grep -q '"code":"model_not_found"' "$D/nm.json" || true   # Anthropic errors carry no code
curl -s -H 'content-type: application/json' -d "{$msg}" "http://127.0.0.1:$port/v1/chat/completions" \
    | grep -q '"code":"model_not_found"' || fail "no model: code model_not_found"

# --- a template that refuses system turns after the first message ---
# (Gemma's and Mistral's insist on alternating user/assistant turns): the
# Anthropic route folds a mid-conversation system turn into the system
# prompt; the OpenAI route passes the template's 400 on.
T="$D/strict_template.gguf"
"$PYTHON" - "$G" "$T" <<'PY' || fail "cannot write the strict-template model"
import sys
sys.path.insert(0, "tools")
import gguf
src, dst = sys.argv[1:]
r = gguf.GGUFReader(src)
w = gguf.GGUFWriter(dst, r.alignment)
for key, (vtype, value, elem) in r.kv.items():
    if key not in ("tokenizer.chat_template", "general.alignment"):
        w.add(key, value, vtype, elem)
w.add("tokenizer.chat_template",
      "{{ bos_token }}{% for m in messages %}"
      "{% if m['role'] == 'system' and not loop.first %}"
      "{{ raise_exception('System role only at the start') }}{% endif %}"
      "[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
      "{% if add_generation_prompt %}[assistant] {% endif %}")
for name, (gtype, shape, _) in r.tensors.items():
    w.add_tensor_raw(name, gtype, shape, r.tensor_bytes(name))
w.write()
PY
start strict -m "$T" || exit 1
turns='[{"role":"user","content":"Once upon a time"},{"role":"system","content":"Lily had a big red ball."},{"role":"user","content":"go on"}]'
r=$(post "$port" /v1/messages "{\"max_tokens\":4,\"messages\":$turns}")
case "$r" in "200 "*) ;; *) fail "a system turn on a strict template: $r" ;; esac
a=$(post "$port" /v1/messages/count_tokens "{\"system\":\"Lily had a big red ball.\",\"messages\":[{\"role\":\"user\",\"content\":\"Once upon a time\"},{\"role\":\"user\",\"content\":\"go on\"}]}")
b=$(post "$port" /v1/messages/count_tokens "{\"messages\":$turns}")
[ "${a#200 }" = "${b#200 }" ] && [ "${a%% *}" = 200 ] \
    || fail "the folded system turn is not the system prompt: $a vs $b"
r=$(post "$port" /v1/chat/completions "{\"max_tokens\":4,\"messages\":$turns}")
case "$r" in "400 "*"System role only at the start"*) ;; *) fail "OpenAI route on a strict template: $r" ;; esac

# --- a bad --host or a busy port: exit 1 with why, never "listening" ---
for h in 999.1.1.1 no-such-host.invalid 192.0.2.1; do
    p=$(freeport)
    timeout 20 "$OMNI" serve --host "$h" --port "$p" --no-tts >"$D/host.log" 2>&1
    rc=$?
    [ $rc -eq 1 ] || fail "--host $h: exit $rc, want 1"
    grep -q "listening" "$D/host.log" && fail "--host $h: logged listening"
    grep -q "cannot listen\|--host '$h'" "$D/host.log" || fail "--host $h: no reason: $(cat "$D/host.log")"
done
timeout 20 "$OMNI" serve --port "$mport" --no-tts >"$D/busy.log" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "port in use: exit $rc, want 1"
grep -q "listening" "$D/busy.log" && fail "port in use: logged listening"
grep -q "Address already in use" "$D/busy.log" || fail "port in use: no reason: $(cat "$D/busy.log")"

[ $fails -eq 0 ] && echo "test_http_clients: ok"
[ $fails -eq 0 ]
