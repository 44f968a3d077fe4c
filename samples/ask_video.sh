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
FILE=${1:-../shared/video/sample.mp4}
KIND=video_url
MIME=video/mp4
Q_CURL='What happens in this clip?'
Q_SDK='What happens in this clip?'
. "$(dirname "$0")/ask_media.sh"
