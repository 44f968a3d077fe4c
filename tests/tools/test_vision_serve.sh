#!/bin/sh
# test_vision_serve.sh - `omniserve serve --mmproj`: a chat message with an
# image_url part (data: URL of the fixture picture) through the tiny LLaVA
# and Idefics3 of tests/fixtures/vision (an Anthropic image block, a
# video_url clip from ../shared sampled into frames): 200
# with the image rows counted in usage.prompt_tokens, the repeated request served from the prefix cache,
# clear 400s for bad base64 and non-images, and image parts refused without
# --mmproj. URLs: http:// from a local server on 127.0.0.1 refused without
# --allow-private-urls (llava run) and fetched with it (idefics3 run);
# file:// inside --media-root read, outside it and through a symlink out refused.
set -u
: "${PYTHON:=/usr/bin/python3}" "${TMP:=/tmp}" "${OMNI:=build/omniserve}"
"$PYTHON" -c 'import numpy' 2>/dev/null || { echo "no numpy"; exit 77; }
[ -x "$OMNI" ] || { echo "no $OMNI"; exit 77; }
V=tests/fixtures/vision
D="$TMP/vision-serve"
rm -rf "$D" && mkdir -p "$D"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }
pid=
stop() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; pid=; }
hpid=
trap 'stop; [ -n "$hpid" ] && kill "$hpid" 2>/dev/null' EXIT
# the media: a root with the fixture picture and a symlink that leads out of it
mkdir -p "$D/media" && cp "$V/image.png" "$D/media/pic.png" && cp "$V/image.png" "$D/outside.png"
ln -s ../outside.png "$D/media/escape.png"
hport=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$PYTHON" -m http.server --bind 127.0.0.1 --directory "$D/media" "$hport" >"$D/http.log" 2>&1 &
hpid=$!

# serve CASE [--mmproj]: start on a free port, wait for /health
serve() {
    port=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "$OMNI" serve -m "$D/$1-lm.gguf" $2 --port "$port" >"$D/serve-$1.log" 2>&1 &
    pid=$!
    "$PYTHON" - "$port" <<'PY' || { fail "server did not start"; cat "$D/serve-$1.log"; }
import sys, time, urllib.request
for _ in range(100):
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health", timeout=1)
        sys.exit(0)
    except Exception:
        time.sleep(0.1)
sys.exit(1)
PY
}

# ask PORT CASE EXPECT: the requests and checks, in Python
ask() {
    "$PYTHON" - "$port" "$V/image.png" "$1" "$2" "$hport" "$D" <<'PY'
import base64, json, sys, urllib.error, urllib.request
port, png, case, mode, hport, D = sys.argv[1:7]
url = f"http://127.0.0.1:{port}/v1/chat/completions"
def post(content):
    body = json.dumps({"messages": [{"role": "user", "content": content}], "max_tokens": 3,
                       "temperature": 0}).encode()
    req = urllib.request.Request(url, body, {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)
data = "data:image/png;base64," + base64.b64encode(open(png, "rb").read()).decode()
image = {"type": "image_url", "image_url": {"url": data}}
bad = []
st, text_only = post("What is this?")
if st != 200:
    bad.append(f"text-only {st}")
st, r = post([{"type": "text", "text": "What is this?"}, image])
if mode == "off":
    if st != 400 or "image_url" not in r["error"]["message"]:
        bad.append(f"without --mmproj: {st} {r}")
else:
    rows = {"llava": 64, "idefics3": 80}[case]
    if st != 200:
        bad.append(f"image request {st} {r}")
    else:
        # the marker (a few tokens) becomes the image rows and the layout's marker tokens
        extra = r["usage"]["prompt_tokens"] - text_only["usage"]["prompt_tokens"]
        if extra < rows:
            bad.append(f"prompt_tokens grew by {extra}, expected at least {rows} image rows")
        st2, r2 = post([{"type": "text", "text": "What is this?"}, image])
        if st2 != 200 or r2["usage"]["prompt_tokens_details"]["cached_tokens"] < rows:
            bad.append(f"repeat not served from the prefix cache: {r2.get('usage')}")
        if r2["choices"][0]["message"] != r["choices"][0]["message"]:
            bad.append("repeat gave another answer at temperature 0")
    # the Anthropic route: an image block with a base64 source
    areq = urllib.request.Request(f"http://127.0.0.1:{port}/v1/messages", json.dumps({
        "model": "x", "max_tokens": 3, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": data.split(",", 1)[1]}},
            {"type": "text", "text": "What is this?"}]}]}).encode(),
        {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(areq, timeout=60) as resp:
            ar = json.load(resp)
        if ar["usage"]["input_tokens"] < rows:
            bad.append(f"anthropic input_tokens {ar['usage']}")
    except urllib.error.HTTPError as e:
        bad.append(f"anthropic image: {e.code} {e.read()[:300]}")
    # a video clip: one image per sampled frame (1 fps, 4 s -> 4 frames)
    import os
    clip = "../shared/video/sample.mp4"
    if os.path.exists(clip):
        vdata = "data:video/mp4;base64," + base64.b64encode(open(clip, "rb").read()).decode()
        st, r = post([{"type": "video_url", "video_url": {"url": vdata}},
                      {"type": "text", "text": "What happens?"}])
        per_frame = {"llava": 64, "idefics3": 16}[case]
        if st != 200 or r["usage"]["prompt_tokens"] < text_only["usage"]["prompt_tokens"] + 4 * per_frame:
            bad.append(f"video: {st} {r.get('usage', r)}")
    def url_part(u):
        return [{"type": "image_url", "image_url": {"url": u}}, {"type": "text", "text": "What is this?"}]
    local = f"http://127.0.0.1:{hport}/pic.png"
    st, r = post(url_part(local))
    if case == "llava" and (st != 400 or "--allow-private-urls" not in r["error"]["message"]):
        bad.append(f"loopback URL without --allow-private-urls: {st} {r}")
    if case == "idefics3" and (st != 200 or r["usage"]["prompt_tokens"] < text_only["usage"]["prompt_tokens"] + rows):
        bad.append(f"loopback URL with --allow-private-urls: {st} {r}")
    if case == "idefics3":
        # an Anthropic image block with a URL source takes the same fetch
        ureq = urllib.request.Request(f"http://127.0.0.1:{port}/v1/messages", json.dumps({
            "model": "x", "max_tokens": 3, "messages": [{"role": "user", "content": [
                {"type": "image", "source": {"type": "url", "url": local}},
                {"type": "text", "text": "What is this?"}]}]}).encode(),
            {"content-type": "application/json"})
        try:
            with urllib.request.urlopen(ureq, timeout=60) as resp:
                ur = json.load(resp)
            if ur["usage"]["input_tokens"] + ur["usage"]["cache_read_input_tokens"] < rows:
                bad.append(f"anthropic url image: {ur['usage']}")
        except urllib.error.HTTPError as e:
            bad.append(f"anthropic url image: {e.code} {e.read()[:300]}")
    if case == "llava":
        st, r = post(url_part(f"file://{D}/media/pic.png"))
        if st != 200:
            bad.append(f"file:// inside --media-root: {st} {r}")
        for u in (f"file://{D}/outside.png", f"file://{D}/media/escape.png", f"file://{D}/media/../outside.png"):
            st, r = post(url_part(u))
            if st != 400 or "media root" not in r["error"]["message"]:
                bad.append(f"{u}: {st} {r}")
    else:
        st, r = post(url_part(f"file://{D}/media/pic.png"))
        if st != 400 or "--media-root" not in r["error"]["message"]:
            bad.append(f"file:// without --media-root: {st} {r}")
        st, r = post(url_part(f"http://127.0.0.1:{hport}/missing.png"))
        if st != 400 or "404" not in r["error"]["message"]:
            bad.append(f"missing URL: {st} {r}")
    for content, want in (([{"type": "image_url", "image_url": {"url": "data:image/png;base64,!!"}}], "invalid base64"),
                          ([{"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8gd29ybGQ="}}], "unrecognised format"),
                          ([image] * 65, "the limit is 64")):
        st, r = post(content)
        if st != 400 or want not in r["error"]["message"]:
            bad.append(f"{want}: {st} {r}")
if mode != "off":
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    vals = {l.split()[0]: float(l.split()[1]) for l in metrics.splitlines()
            if l.startswith("omniserve_vision_")}
    if vals.get("omniserve_vision_cache_hits_total", 0) < 1 or vals.get("omniserve_vision_cache_misses_total", 0) < 1 \
            or "omniserve_vision_encoder_seconds_total" not in vals:
        bad.append(f"vision metrics: {vals}")
if bad:
    sys.exit("; ".join(bad))
PY
}

for c in llava idefics3; do
    "$PYTHON" tools/hf_mmproj_to_gguf.py "$V/$c" "$D/$c-mmproj.gguf" --type f16 \
        --lm "$D/$c-lm.gguf" --lm-type f32 2>"$D/$c.log" || { fail "convert $c"; cat "$D/$c.log"; continue; }
    if [ $c = llava ]; then extra="--media-root $D/media"; else extra=--allow-private-urls; fi
    serve $c "--mmproj $D/$c-mmproj.gguf $extra"
    ask $c on || fail "$c with --mmproj"
    stop
done
serve llava ""
ask llava off || fail "llava without --mmproj"
stop

# a wrong --mmproj: the server refuses to start, naming the file
"$OMNI" serve -m "$D/llava-lm.gguf" --mmproj "$D/llava-lm.gguf" --port 1 >"$D/bad.log" 2>&1 &&
    fail "serve started with an LM as --mmproj"
grep -q "projector_type" "$D/bad.log" || fail "bad --mmproj message: $(cat "$D/bad.log")"

[ $fails -eq 0 ]
