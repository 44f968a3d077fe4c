#!/bin/bash
# make_device_folder.sh - fills the ignored folder the GPU machine's jobs
# carry (default build-h7dev/, see docs/gpu.md "Building"): llama.cpp's
# source as llama_src.tgz (from the npm package node-llama-cpp's git
# bundle, without .git, docs, models and the other GPU backends: ~11 MB),
# Debian's static pcre2 (pcre2/include, pcre2/lib/libpcre2-8.a) and the
# llama-bpe / qwen2 vocabularies from ../shared/vocab. Needs npm, git,
# apt-get download and dpkg-deb here; each piece already present is kept.
#   tools/make_device_folder.sh [DIR]
set -eu
DIR=${1:-build-h7dev}
SHARED=${SHARED:-../shared}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
step() { echo "== $*" >&2; }

if [ ! -f "$DIR/llama_src.tgz" ]; then
    step "llama.cpp: npm pack node-llama-cpp, clone its bundle"
    (cd "$TMP" && npm pack --silent node-llama-cpp > /dev/null && tar xzf node-llama-cpp-*.tgz &&
        git -c advice.detachedHead=false clone -q package/llama/gitRelease.bundle llama.cpp)
    # only top-level docs/ and models/: tools/mtmd/models/ holds sources
    tar czf "$DIR/llama_src.tgz" -C "$TMP" --exclude=.git --exclude=llama.cpp/docs --exclude=llama.cpp/models \
        --exclude=ggml/src/ggml-vulkan --exclude=ggml/src/ggml-sycl --exclude=ggml/src/ggml-metal \
        --exclude=ggml/src/ggml-cann --exclude=ggml/src/ggml-musa --exclude=ggml/src/ggml-opencl \
        --exclude=ggml/src/ggml-hip --exclude=examples/llama.android --exclude=tools/server/public \
        --exclude=tools/server/webui llama.cpp
fi
if [ ! -f "$DIR/pcre2/lib/libpcre2-8.a" ]; then
    step "pcre2: apt-get download libpcre2-dev"
    (cd "$TMP" && apt-get download libpcre2-dev > /dev/null 2>&1 && dpkg-deb -x libpcre2-dev_*.deb x)
    mkdir -p "$DIR/pcre2/include" "$DIR/pcre2/lib"
    cp "$TMP"/x/usr/include/pcre2.h "$DIR/pcre2/include/"
    cp "$TMP"/x/usr/lib/*/libpcre2-8.a "$DIR/pcre2/lib/"
fi
for v in ggml-vocab-llama-bpe.gguf ggml-vocab-qwen2.gguf; do
    [ -f "$DIR/$v" ] || cp "$SHARED/vocab/$v" "$DIR/"
done
du -sh "$DIR" >&2
