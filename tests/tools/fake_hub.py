#!/usr/bin/env python3
"""fake_hub.py - a local stand-in for the Hugging Face hub and its CDN, for
tests/tools/test_download.sh. Listens on 127.0.0.1 only: the hub answers
/{repo}/resolve/{rev}/{file} with a 302 to the CDN (another port, or a path on
the hub with --same-origin) carrying X-Linked-Size and X-Linked-Etag like the
real hub; the CDN serves the bytes with Content-Length and Range/206/416.
--drop-after N --drop-times K cut the first K CDN bodies after N bytes (for
resume); every request is logged as one JSON line to --log.

usage: fake_hub.py --entry REPO FILE PATH [--entry ...] --port-file F [options]
"""
import argparse
import hashlib
import http.server
import json
import os
import threading


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--entry", nargs=3, action="append", metavar=("REPO", "FILE", "PATH"),
                    required=True)
    ap.add_argument("--port-file", required=True, help="gets 'HUB_PORT CDN_PORT'")
    ap.add_argument("--log", help="one JSON line per request")
    ap.add_argument("--same-origin", action="store_true", help="redirect to /cdn/ on the hub")
    ap.add_argument("--drop-after", type=int, default=-1)
    ap.add_argument("--drop-times", type=int, default=0)
    ap.add_argument("--no-range", action="store_true", help="ignore Range (always 200)")
    ap.add_argument("--bad-sha", action="store_true", help="announce a wrong SHA-256")
    ap.add_argument("--bad-size", action="store_true", help="announce one byte more")
    ap.add_argument("--token", help="require 'Authorization: Bearer TOKEN' on the hub")
    return ap.parse_args()


ARGS = parse_args()
FILES = {}  # (repo, file) -> (bytes, sha256 hex)
BLOBS = {}  # sha -> bytes
for repo, name, path in ARGS.entry:
    data = open(path, "rb").read()
    sha = hashlib.sha256(data).hexdigest()
    FILES[(repo, name)] = (data, sha)
    BLOBS[sha] = data
LOCK = threading.Lock()
STATE = {"drops": 0}
PORTS = {}


def log(server, handler):
    if not ARGS.log:
        return
    rec = {"server": server, "method": handler.command, "path": handler.path,
           "range": handler.headers.get("Range"),
           "authorization": handler.headers.get("Authorization")}
    with LOCK, open(ARGS.log, "a") as f:
        f.write(json.dumps(rec) + "\n")


class Base(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def reply(self, status, headers=(), body=b""):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def hub_error(self, status, code, msg):
        self.reply(status, [("X-Error-Code", code), ("X-Error-Message", msg),
                            ("Content-Type", "application/json")],
                   json.dumps({"error": msg}).encode())

    def serve_blob(self, sha):
        data = BLOBS.get(sha)
        if data is None:
            return self.reply(404, body=b"no such blob")
        size, start = len(data), 0
        rng = None if ARGS.no_range else self.headers.get("Range")
        headers = [("Accept-Ranges", "bytes"), ("ETag", '"cdn-%s"' % sha[:16]),
                   ("Content-Type", "application/octet-stream")]
        if rng and rng.startswith("bytes=") and rng.endswith("-"):
            start = int(rng[6:-1])
            if start >= size:
                return self.reply(416, [("Content-Range", "bytes */%d" % size)])
            status = 206
            headers.append(("Content-Range", "bytes %d-%d/%d" % (start, size - 1, size)))
        else:
            status = 200
        body = data[start:]
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command == "HEAD":
            return
        with LOCK:
            drop = ARGS.drop_after >= 0 and STATE["drops"] < ARGS.drop_times
            if drop:
                STATE["drops"] += 1
        if drop:
            # a broken connection mid-file: part of the body, then gone
            self.wfile.write(body[:ARGS.drop_after])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self.wfile.write(body)


class Hub(Base):
    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        log("hub", self)
        path = self.path.split("?")[0]
        if path.startswith("/cdn/"):
            return self.serve_blob(path[5:])
        if ARGS.token and self.headers.get("Authorization") != "Bearer " + ARGS.token:
            return self.hub_error(401, "GatedRepo", "Access to this model is restricted.")
        parts = path.lstrip("/").split("/")
        if parts[:2] == ["api", "models"] and len(parts) == 6 and parts[4] == "revision":
            repo = parts[2] + "/" + parts[3]
            names = [f for (r, f) in FILES if r == repo]
            if not names:
                return self.hub_error(401, "RepoNotFound", "Repository not found")
            body = {"id": repo, "sha": "0" * 40, "siblings": [{"rfilename": n} for n in names]}
            return self.reply(200, [("Content-Type", "application/json")],
                              json.dumps(body).encode())
        if len(parts) < 5 or parts[2] != "resolve":
            return self.reply(404, body=b"not found")
        repo, rev, name = parts[0] + "/" + parts[1], parts[3], "/".join(parts[4:])
        if not any(r == repo for (r, _) in FILES):
            return self.hub_error(401, "RepoNotFound", "Repository not found")
        if rev != "main":
            return self.hub_error(404, "RevisionNotFound", "Invalid rev id: " + rev)
        if (repo, name) not in FILES:
            return self.hub_error(404, "EntryNotFound", "Entry not found")
        data, sha = FILES[(repo, name)]
        announced = "f" * 64 if ARGS.bad_sha else sha
        size = len(data) + (1 if ARGS.bad_size else 0)
        loc = ("/cdn/%s" % sha if ARGS.same_origin
               else "http://127.0.0.1:%d/blobs/%s" % (PORTS["cdn"], sha))
        self.reply(302, [("Location", loc), ("X-Linked-Size", str(size)),
                         ("X-Linked-Etag", '"%s"' % announced), ("ETag", '"%s"' % announced),
                         ("X-Repo-Commit", "0" * 40)])


class Cdn(Base):
    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        log("cdn", self)
        path = self.path.split("?")[0]
        if not path.startswith("/blobs/"):
            return self.reply(404, body=b"not found")
        self.serve_blob(path[7:])


class Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # clients that leave early and the connections we drop on purpose


def main():
    hub = Server(("127.0.0.1", 0), Hub)
    cdn = Server(("127.0.0.1", 0), Cdn)
    hub.daemon_threads = cdn.daemon_threads = True
    PORTS["hub"], PORTS["cdn"] = hub.server_address[1], cdn.server_address[1]
    threading.Thread(target=cdn.serve_forever, daemon=True).start()
    tmp = ARGS.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d %d\n" % (PORTS["hub"], PORTS["cdn"]))
    os.rename(tmp, ARGS.port_file)
    hub.serve_forever()


if __name__ == "__main__":
    main()
