#!/bin/sh
# ask_video.sh - ask a running `omniserve serve -m LM.gguf --mmproj MMPROJ.gguf`
# about ../shared/video/sample.mp4 (sampled at 1 fps, each frame an image):
# once with curl (a data: URL), once with
# the OpenAI Node SDK when node and the `openai` package are there.
#
# A model: a real SmolVLM or LLaVA GGUF with its mmproj from the hub, e.g.
#   build/omniserve pull hf://ggml-org/SmolVLM-256M-Instruct-GGUF:SmolVLM-256M-Instruct-Q8_0.gguf
#   build/omniserve pull hf://ggml-org/SmolVLM-256M-Instruct-GGUF:mmproj-SmolVLM-256M-Instruct-Q8_0.gguf
#   build/omniserve serve -m ~/.cache/omniserve/.../SmolVLM-256M-Instruct-Q8_0.gguf \
#       --mmproj ~/.cache/omniserve/.../mmproj-SmolVLM-256M-Instruct-Q8_0.gguf
# or, for a smoke test (random weights, nonsense answers), the tiny fixture:
#   tools/hf_mmproj_to_gguf.py tests/fixtures/vision/idefics3 /tmp/mm.gguf --lm /tmp/lm.gguf
#   build/omniserve serve -m /tmp/lm.gguf --mmproj /tmp/mm.gguf
# With --media-root ../shared the server also reads file:// URLs from there.
set -eu
URL=${OMNISERVE_URL:-http://127.0.0.1:8000}
IMG=${1:-../shared/video/sample.mp4}
B64=$(base64 -w0 "$IMG")
BODY=$(mktemp)
trap 'rm -f "$BODY"' EXIT
printf '{"max_tokens":64,"messages":[{"role":"user","content":[{"type":"text","text":"What happens in this clip?"},{"type":"video_url","video_url":{"url":"data:video/mp4;base64,%s"}}]}]}' \
    "$B64" >"$BODY"
echo "== curl"
curl -sS "$URL/v1/chat/completions" -H 'content-type: application/json' --data-binary @"$BODY"
echo
if command -v node >/dev/null && node -e 'require("openai")' 2>/dev/null; then
    echo "== OpenAI SDK (node)"
    URL="$URL" IMG="$IMG" node -e '
const OpenAI = require("openai");
const fs = require("fs");
const client = new OpenAI({ baseURL: process.env.URL + "/v1", apiKey: process.env.OMNISERVE_API_KEY || "none" });
const data = "data:video/mp4;base64," + fs.readFileSync(process.env.IMG).toString("base64");
client.chat.completions.create({ model: "default", max_tokens: 64, messages: [{ role: "user", content: [
    { type: "text", text: "What happens in this clip?" },
    { type: "video_url", video_url: { url: data } }] }] })
  .then(r => console.log(r.choices[0].message.content, "\n(prompt tokens:", r.usage.prompt_tokens + ")"))
  .catch(e => { console.error(e.message); process.exit(1); });'
else
    echo "(no node with the openai package: npm install openai for the SDK example)"
fi
