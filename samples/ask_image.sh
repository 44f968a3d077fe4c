#!/bin/sh
# ask_image.sh - ask a running `omniserve serve -m LM.gguf --mmproj MMPROJ.gguf`
# about ../shared/images/test-1.jpeg: once with curl (a data: URL), once with
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
FILE=${1:-../shared/images/test-1.jpeg}
KIND=image_url
MIME=image/jpeg
Q_CURL='What is in this picture?'
Q_SDK='Describe this picture in one sentence.'
. "$(dirname "$0")/ask_media.sh"
