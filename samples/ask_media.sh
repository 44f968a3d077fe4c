# ask_media.sh - sourced by ask_image.sh and ask_video.sh: asks a running
# omniserve about one media file, once with curl (a data: URL), once with the
# OpenAI Node SDK when node and the `openai` package are there.
# Set before sourcing: FILE (the media file), KIND (image_url or video_url),
# MIME (e.g. image/jpeg), Q_CURL and Q_SDK (the questions asked).
set -eu
URL=${OMNISERVE_URL:-http://127.0.0.1:8000}
B64=$(base64 -w0 "$FILE")
BODY=$(mktemp)
trap 'rm -f "$BODY"' EXIT
printf '{"max_tokens":64,"messages":[{"role":"user","content":[{"type":"text","text":"%s"},{"type":"%s","%s":{"url":"data:%s;base64,%s"}}]}]}' \
    "$Q_CURL" "$KIND" "$KIND" "$MIME" "$B64" >"$BODY"
echo "== curl"
curl -sS "$URL/v1/chat/completions" -H 'content-type: application/json' --data-binary @"$BODY"
echo
if command -v node >/dev/null && node -e 'require("openai")' 2>/dev/null; then
    echo "== OpenAI SDK (node)"
    URL="$URL" FILE="$FILE" KIND="$KIND" MIME="$MIME" Q="$Q_SDK" node -e '
const OpenAI = require("openai");
const fs = require("fs");
const client = new OpenAI({ baseURL: process.env.URL + "/v1", apiKey: process.env.OMNISERVE_API_KEY || "none" });
const data = "data:" + process.env.MIME + ";base64," + fs.readFileSync(process.env.FILE).toString("base64");
const part = { type: process.env.KIND };
part[process.env.KIND] = { url: data };
client.chat.completions.create({ model: "default", max_tokens: 64, messages: [{ role: "user", content: [
    { type: "text", text: process.env.Q }, part] }] })
  .then(r => console.log(r.choices[0].message.content, "\n(prompt tokens:", r.usage.prompt_tokens + ")"))
  .catch(e => { console.error(e.message); process.exit(1); });'
else
    echo "(no node with the openai package: npm install openai for the SDK example)"
fi
