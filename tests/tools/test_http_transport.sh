#!/bin/sh
# test_http_transport.sh - the HTTP/1.1 transport of `omniserve serve` on raw
# loopback sockets (no model needed): pipelined GETs and POSTs answered in
# order, Connection: close honoured without a Content-Length, oversized
# headers and URIs answered 431/414, Transfer-Encoding other than chunked
# refused, Host and Origin checked on loopback, WebSocket upgrades refused
# with a status - and, with a small fd limit, 150 clients trickling request
# bytes do not lock out a new client. Timeouts only detect hangs.
set -u
: "${OMNI:=build/omniserve}" "${PYTHON:=python3}" "${TMP:=/tmp}"
[ -x "$OMNI" ] || { echo "no $OMNI"; exit 77; }
free_port() {
    "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
port=$(free_port)
"$OMNI" serve --port "$port" >"$TMP/http_serve.log" 2>&1 &
spid=$!
# A second server under a small fd limit: about 30 connections fit.
port2=$(free_port)
(ulimit -n 100 && exec "$OMNI" serve --port "$port2") >"$TMP/http_serve2.log" 2>&1 &
spid2=$!
trap 'kill $spid $spid2 2>/dev/null' EXIT
"$PYTHON" - "$port" "$port2" <<'PY'
import re, socket, sys, time

port, port2 = int(sys.argv[1]), int(sys.argv[2])
errors = []

def wait_up(p):
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", p), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit("server on %d did not start" % p)

def exchange(p, data, expect_close):
    """Sends data, reads until EOF (or, without expect_close, until the
    answers stop coming); returns [(status, headers, body)]."""
    s = socket.create_connection(("127.0.0.1", p))
    s.settimeout(10 if expect_close else 2)
    s.sendall(data)
    buf, eof = b"", False
    try:
        while True:
            d = s.recv(65536)
            if not d:
                eof = True
                break
            buf += d
    except socket.timeout:
        pass
    except ConnectionResetError:
        errors.append("connection reset on port %d" % p)
    s.close()
    out = []
    while buf:
        head, sep, rest = buf.partition(b"\r\n\r\n")
        if not sep:
            break
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        hdrs = {k.strip().lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
        n = int(hdrs.get("content-length", "0"))
        out.append((status, hdrs, rest[:n]))
        buf = rest[n:]
    return out, eof

def check(name, data, statuses, expect_close, ids=None):
    got, eof = exchange(port, data, expect_close)
    st = [g[0] for g in got]
    if st != statuses:
        errors.append("%s: statuses %s, want %s" % (name, st, statuses))
    elif expect_close and not eof:
        errors.append("%s: connection not closed" % name)
    elif expect_close and got[-1][1].get("connection") != "close":
        errors.append("%s: no Connection: close" % name)
    elif not expect_close and eof:
        errors.append("%s: connection closed" % name)
    elif ids and [g[1].get("x-request-id") for g in got] != ids:
        errors.append("%s: answers out of order: %s" % (name, [g[1].get("x-request-id") for g in got]))
    for s, h, b in got:
        if s >= 400 and b"error" not in b:
            errors.append("%s: %d without a JSON error body: %r" % (name, s, b[:100]))

wait_up(port)
H = b"Host: 127.0.0.1\r\n"
def get(path, rid):
    return b"GET %s HTTP/1.1\r\n%sX-Request-Id: %s\r\n\r\n" % (path, H, rid)
def post(path, rid, body):
    return (b"POST %s HTTP/1.1\r\n%sX-Request-Id: %s\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (path, H, rid, len(body), body))

check("3 pipelined GETs", get(b"/health", b"g1") + get(b"/health", b"g2") + get(b"/health", b"g3"),
      [200, 200, 200], False, ["g1", "g2", "g3"])
check("2 pipelined POSTs and a GET",
      post(b"/tokenize", b"p1", b'{"prompt":"a"}') + post(b"/tokenize", b"p2", b'{"prompt":"b"}')
      + get(b"/health", b"p3"), [404, 404, 200], False, ["p1", "p2", "p3"])
check("POST, no Content-Length, Connection: close",
      b"POST /health HTTP/1.1\r\n" + H + b"Connection: close\r\n\r\n", [405], True)
check("20 KB header", b"GET /health HTTP/1.1\r\n" + H + b"X-Big: " + b"a" * 20000 + b"\r\n\r\n",
      [431], True)
check("20 KB URI", b"GET /health?" + b"a" * 20000 + b" HTTP/1.1\r\n" + H + b"\r\n", [414], True)
check("TE notchunked", b"POST /tokenize HTTP/1.1\r\n" + H +
      b"Transfer-Encoding: notchunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", [400], True)
check("TE gzip, chunked", b"POST /tokenize HTTP/1.1\r\n" + H +
      b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", [501], True)
check("Host evil.example", b"GET /health HTTP/1.1\r\nHost: evil.example\r\n\r\n", [403], True)
check("Host localhost", b"GET /health HTTP/1.1\r\nHost: localhost:%d\r\n\r\n" % port, [200], False)
check("Origin evil.example", b"POST /tokenize HTTP/1.1\r\n" + H +
      b"Origin: http://evil.example\r\nContent-Length: 2\r\n\r\n{}", [403], True)
WS = (b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
      b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n")
check("WebSocket, bad Origin", b"GET /v1/realtime HTTP/1.1\r\n" + H + WS +
      b"Origin: http://evil.example\r\n\r\n", [403], True)
check("WebSocket, no endpoint", b"GET /nowhere HTTP/1.1\r\n" + H + WS + b"\r\n", [404], True)
check("WebSocket, no key", b"GET /v1/realtime HTTP/1.1\r\n" + H +
      b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n", [400], True)

# Slow clients: 150 connections each holding an unfinished request on a
# server with room for about 30 - a new client still gets its answer.
wait_up(port2)
slow = []
for i in range(150):
    try:
        s = socket.create_connection(("127.0.0.1", port2), timeout=5)
        s.sendall(b"POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{")
        slow.append(s)
    except OSError as e:
        errors.append("slow client %d: %r" % (i, e))
        break
for attempt in range(3):
    try:
        c = socket.create_connection(("127.0.0.1", port2), timeout=10)
        c.settimeout(10)
        c.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        line = c.recv(64)
        c.close()
        if not line.startswith(b"HTTP/1.1 200"):
            errors.append("health with slow clients around: %r" % line)
        break
    except OSError as e:
        if attempt == 2:
            errors.append("health with slow clients around: %r" % e)
for s in slow:
    s.close()

for e in errors:
    print("FAIL: " + e)
sys.exit(1 if errors else 0)
PY
rc=$?
[ $rc -eq 0 ] || { tail -n 20 "$TMP/http_serve.log"; tail -n 5 "$TMP/http_serve2.log"; }
exit $rc
