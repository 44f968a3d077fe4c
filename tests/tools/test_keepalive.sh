#!/bin/sh
# test_keepalive.sh - HTTP/1.1 keep-alive against `omniserve serve` (stories260K)
# on raw sockets: one connection carrying many requests one after another
# (streams, plain bodies, GETs, each sent the moment the previous response
# ended), several such clients at once, and pipelined requests (sent before
# the previous response): GETs and POSTs, streams among them, are all
# answered in order on the one connection - never a hang, a close, a wrong
# answer or a busy server. Timeouts only detect hangs.
set -u
: "${OMNI:=build/omniserve}" "${PYTHON:=/usr/bin/python3}" "${TMP:=/tmp}"
[ -x "$OMNI" ] || { echo "no $OMNI"; exit 77; }
[ -f ../shared/models/stories260K/stories260K.bin ] || { echo "no stories260K"; exit 77; }
G="$TMP/keepalive.gguf"
tools/llama2c_to_gguf ../shared/models/stories260K/stories260K.bin \
    ../shared/models/stories260K/tok512.bin "$G" >/dev/null 2>&1 || { echo "FAIL: convert"; exit 1; }
port=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$OMNI" serve -m "$G" --port "$port" --threads 1 >"$TMP/ka_serve.log" 2>&1 &
spid=$!
trap 'kill $spid 2>/dev/null' EXIT
"$PYTHON" - "$port" <<'PY'
import json, socket, sys, threading, time, urllib.request

port = int(sys.argv[1])
for _ in range(100):
    try:
        urllib.request.urlopen("http://127.0.0.1:%d/health" % port)
        break
    except OSError:
        time.sleep(0.1)

def completion(stream, n=6):
    return json.dumps({"prompt": "Once upon a time", "max_tokens": n, "temperature": 0,
                       "stream": stream})

def post(path, body):
    b = body.encode()
    return (b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % (path.encode(), len(b))) + b

def get(path):
    return b"GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % path.encode()

class Closed(Exception):
    pass

def read_response(f):
    """(status, headers, body) of one response; Closed at a clean end of stream."""
    line = f.readline()
    if not line:
        raise Closed()
    status = int(line.split()[1])
    hdrs = {}
    while True:
        l = f.readline()
        if l in (b"\r\n", b""):
            break
        k, v = l.decode().split(":", 1)
        hdrs[k.strip().lower()] = v.strip()
    if "content-length" in hdrs:
        body = f.read(int(hdrs["content-length"]))
    else:
        assert hdrs.get("transfer-encoding") == "chunked", hdrs
        body = b""
        while True:
            size = int(f.readline().split(b";")[0], 16)
            if size == 0:
                while f.readline() not in (b"\r\n", b""):
                    pass
                break
            body += f.read(size)
            assert f.readline() == b"\r\n"
    return status, hdrs, body

def check(kind, status, body):
    """The response fits the request: 200 and the right shape."""
    if status != 200:
        return "HTTP %d: %r" % (status, body[:200])
    if kind == "stream":
        if not body.rstrip().endswith(b"data: [DONE]"):
            return "stream without [DONE]: %r" % body[-200:]
    elif kind == "plain":
        if json.loads(body)["object"] != "text_completion":
            return "not a completion: %r" % body[:200]
    elif kind == "health":
        if json.loads(body)["status"] != "ok":
            return "health: %r" % body
    elif kind == "tokenize":
        if not json.loads(body)["tokens"]:
            return "tokenize: %r" % body
    return None

def connect():
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(30)   # a hang, not a slow answer
    return s, s.makefile("rb")

REQS = [("stream", post("/v1/completions", completion(True))),
        ("plain", post("/v1/completions", completion(False))),
        ("health", get("/health")),
        ("tokenize", post("/tokenize", json.dumps({"prompt": "Once upon a time"}))),
        ("stream", post("/v1/completions", completion(True, 1)))]

errors = []

def sequential(name, rounds):
    """Many requests on one connection, each sent as soon as the last answer ended."""
    s, f = connect()
    try:
        for i in range(rounds):
            kind, raw = REQS[i % len(REQS)]
            s.sendall(raw)
            status, hdrs, body = read_response(f)
            err = check(kind, status, body)
            if err or hdrs.get("connection") == "close":
                errors.append("%s #%d %s: %s" % (name, i, kind, err or "connection: close"))
                return
    except (Closed, OSError) as e:
        errors.append("%s: %r" % (name, e))
    finally:
        s.close()

def pipelined(name, reqs, may_close=False):
    """All requests at once: the answers come in order (with may_close the
    server may close the connection after some of them instead)."""
    s, f = connect()
    try:
        s.sendall(b"".join(raw for _, raw in reqs))
        for i, (kind, _) in enumerate(reqs):
            try:
                status, hdrs, body = read_response(f)
            except Closed:
                if not may_close:
                    errors.append("%s: closed after %d answers" % (name, i))
                return
            err = check(kind, status, body)
            if err:
                errors.append("%s #%d %s: %s" % (name, i, kind, err))
                return
    except OSError as e:     # a timeout here is the hang this test is about
        errors.append("%s: %r" % (name, e))
    finally:
        s.close()

sequential("one client", 40)
threads = [threading.Thread(target=sequential, args=("client %d" % i, 15)) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
pipelined("pipelined GETs", [REQS[2]] * 4)
pipelined("pipelined POSTs", REQS[:2] * 2)
pipelined("GET then POSTs", [REQS[2], REQS[3], REQS[0]])
threads = [threading.Thread(target=pipelined, args=("pipelined %d" % i, REQS * 2))
           for i in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
# The server is still fine afterwards: a fresh keep-alive client works.
sequential("after pipelining", 10)

for e in errors:
    print("FAIL: " + e)
sys.exit(1 if errors else 0)
PY
rc=$?
[ $rc -eq 0 ] || tail -n 20 "$TMP/ka_serve.log"
exit $rc
