# omniserve - the one build entry.
#   make            build build/omniserve
#   make setup      install missing Debian packages (idempotent)
#   make test       setup, build, run every test suite
#   make run        setup, build, start omniserve
#   make asan       build with -fsanitize=address,undefined and run the unit tests
#   make bench      speed benchmarks (machine-readable, with baseline ratios)
#   make fuzz       libFuzzer targets under build-fuzz, FUZZ_SECONDS each (tests/fuzz)
#   make samples    build/samples/*: programs on the library (mic_transcribe, portaudio)
# Variables: DEBUG=1, SAN=address, NATIVE=1, CC, EXTRA_CFLAGS.

CC      ?= gcc
BUILD   ?= build
SAN     ?=
PKGS    := libpcre2-8 openblas libavformat libavcodec libavutil libswresample libswscale libpng libjpeg zlib libwebsockets openssl libcjson libcurl espeak-ng
APT_PKGS := build-essential pkg-config libwebsockets-dev libssl-dev libcjson-dev libopenblas-dev \
	libavformat-dev libavcodec-dev libavutil-dev libswscale-dev libswresample-dev \
	libpng-dev libjpeg62-turbo-dev portaudio19-dev libespeak-ng-dev libpcre2-dev \
	zlib1g-dev python3 python3-numpy python3-jinja2 libcurl4-openssl-dev \
	clang libclang-rt-14-dev chromium

OPT     := $(if $(DEBUG),-O0,-O2)
# A portable binary by default: the generic code targets x86-64-v2 (SSE4.2),
# and the AVX2 / AVX-512 / AMX kernels (src/core/arch/x86/, each file under
# its own `#pragma GCC target`) are picked at run time from CPUID (cpu.h).
# NATIVE=1 builds for this host only (-march=native: the generic code
# vectorized for it too).
ARCH    := $(if $(NATIVE),-march=native,-march=x86-64-v2)
# -Wno-psabi: GCC notes that 64-byte vector arguments are passed differently
# with and without AVX-512; only static functions take them, so no ABI
# boundary is crossed (the note appears on machines without AVX-512).
CFLAGS  := -std=gnu11 $(OPT) $(ARCH) -g -Wall -Wextra -Wno-psabi -pthread -I. \
	   -fno-strict-aliasing $(if $(SAN),-fsanitize=$(SAN) -fno-omit-frame-pointer) \
	   $(shell pkg-config --cflags $(PKGS) 2>/dev/null) $(EXTRA_CFLAGS)
LDLIBS  := $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lm -pthread
LDFLAGS := $(if $(SAN),-fsanitize=$(SAN))

# Python interpreter for tools and fixture checks: the first that imports numpy.
PYTHON  ?= $(shell for p in python3 /usr/bin/python3; do $$p -c 'import numpy' >/dev/null 2>&1 && echo $$p && break; done)

LIB_SRCS  := $(shell find src llm media vision audio ws -name '*.c' ! -path src/main.c 2>/dev/null | sort)
TEST_SRCS := $(sort $(wildcard tests/test_*.c)) tests/test_main.c
LIB_OBJS  := $(LIB_SRCS:%.c=$(BUILD)/%.o)
# The web playground's files, embedded as C data (see "web playground" below).
WEB_FILES := $(sort $(wildcard src/api/web/*))
LIB_OBJS  += $(BUILD)/gen/web_files.o
TEST_OBJS := $(TEST_SRCS:%.c=$(BUILD)/%.o)
MAIN_OBJ  := $(BUILD)/src/main.o
DEPS      := $(LIB_OBJS:.o=.d) $(TEST_OBJS:.o=.d) $(MAIN_OBJ:.o=.d)

.PHONY: all setup test unit-test tool-test run asan bench clean fixtures
all: $(BUILD)/omniserve

# Rebuild everything when the flags change.
$(BUILD)/.flags: FORCE
	@mkdir -p $(BUILD)
	@echo '$(CC) $(CFLAGS) $(LDFLAGS) $(LDLIBS)' | cmp -s - $@ || echo '$(CC) $(CFLAGS) $(LDFLAGS) $(LDLIBS)' > $@
FORCE:

$(BUILD)/%.o: %.c $(BUILD)/.flags
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libomni.a: $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/omniserve: $(MAIN_OBJ) $(BUILD)/libomni.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/test_runner: $(TEST_OBJS) $(BUILD)/libomni.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

setup:
	@missing=""; for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	command -v node >/dev/null 2>&1 || missing="$$missing nodejs"; \
	command -v npm >/dev/null 2>&1 || missing="$$missing npm"; \
	if [ -n "$$missing" ]; then \
		echo "setup: installing$$missing"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	else echo "setup: all packages present"; fi

unit-test: $(BUILD)/test_runner $(BUILD)/omniserve
	$(BUILD)/test_runner

tool-test: $(BUILD)/omniserve samples
	@if [ -z "$(PYTHON)" ]; then echo "tool-test: no python3 with numpy (run make setup)"; exit 1; fi
	PYTHON=$(PYTHON) OMNI=$(BUILD)/omniserve sh tests/tools/run_all.sh

test: setup
	$(MAKE) all $(BUILD)/test_runner samples
	$(MAKE) tool-test
	$(MAKE) unit-test
	$(MAKE) client-test
	$(MAKE) browser-test
	$(MAKE) load-test
	$(MAKE) fuzz-smoke

# The HTTP server driven by the official openai / @anthropic-ai/sdk npm
# packages (tests/clients, lockfile committed); skips without a model.
.PHONY: client-test
client-test: $(BUILD)/omniserve
	cd tests/clients && npm ci --no-audit --no-fund --loglevel=error && \
		OMNI=$(BUILD)/omniserve PYTHON=$(PYTHON) node --test

# Load and fault tests (tests/load; node's http and net, no npm packages):
# 64 streaming clients with disconnects and slow readers, cut uploads,
# realtime sockets dropped without a close frame, then idle /metrics and RSS
# within 10% of the warm-up; SIGTERM mid-stream. About 20 s; LOAD_SCALE=N
# is the long form (docs/reliability.md). Skips without ../shared.
.PHONY: load-test
load-test: $(BUILD)/omniserve
	cd tests/load && OMNI=$(BUILD)/omniserve PYTHON=$(PYTHON) node --test --test-concurrency=1

# The web playground in headless Chromium (tests/browser: the npm package
# playwright-core driving Debian's chromium with a fake microphone): page
# load, streamed chat, dictation, the play button, the voice agent.
# Screenshots: $(BUILD)/browser-*.png. Skips without chromium or ../shared.
.PHONY: browser-test
browser-test: $(BUILD)/omniserve
	cd tests/browser && npm ci --no-audit --no-fund --loglevel=error && \
		OMNI=$(BUILD)/omniserve OMNI_SHOTS=$(BUILD) PYTHON=$(PYTHON) node --test

# ---- web playground (docs/playground.md) ------------------------------------
# tools/embed (built first, host compiler, no other tool) turns src/api/web/*
# into $(BUILD)/gen/web_files.c: one byte array per file, names and ETags.
.PRECIOUS: %/tools/embed
%/tools/embed: tools/embed.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -O2 -Wall -Wextra -o $@ $<
%/gen/web_files.c: %/tools/embed $(WEB_FILES)
	@mkdir -p $(dir $@)
	$*/tools/embed -o $@ -s web_files -C src/api/web $(notdir $(WEB_FILES))
$(BUILD)/gen/web_files.o: $(BUILD)/gen/web_files.c $(BUILD)/.flags
	$(CC) $(CFLAGS) -c $< -o $@

# `omniserve serve` on 127.0.0.1:8000 with MODEL=path.gguf (tools/demo_run.sh;
# without MODEL: the cached default model, else a server that explains).
# A fresh make after setup: pkg-config flags and PYTHON are read when the
# Makefile is parsed, so packages setup installs are seen only by a new make.
run: setup
	@$(MAKE) --no-print-directory run-installed
.PHONY: run-installed
run-installed: all
	@PYTHON=$(PYTHON) OMNI=$(BUILD)/omniserve MODEL=$(MODEL) sh tools/demo_run.sh

asan:
	$(MAKE) BUILD=build-asan SAN=address,undefined EXTRA_CFLAGS="-O1" build-asan/test_runner build-asan/omniserve
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 build-asan/test_runner

# make bench [PEERS=DIR]: against llama.cpp/whisper.cpp under DIR, else the
# previous commit's build; writes bench/results.json and bench/results.md.
bench: all
	PYTHON=$(PYTHON) OMNI=$(BUILD)/omniserve BENCH_DIR=$(BUILD)/bench PEERS=$(PEERS) sh tools/bench_suite.sh

clean:
	rm -rf build build-asan build-fuzz

# ---- golden model fixtures (tests/test_model.c) ---------------------------
# Each tiny Hugging Face checkpoint in tests/fixtures/golden/<model>/ (made by
# tools/make_golden.py) is converted by tools/hf_to_gguf.py into
# $(BUILD)/fixtures/<model>-{f32,f16,q8_0}.gguf; the unit tests read them from
# $$OMNI_GOLDEN_DIR (default build/fixtures).
GOLDEN_MODELS := $(notdir $(patsubst %/,%,$(dir $(wildcard tests/fixtures/golden/*/config.json))))
GOLDEN_GGUFS  := $(foreach m,$(GOLDEN_MODELS),$(foreach t,f32 f16 q8_0,$(BUILD)/fixtures/$(m)-$(t).gguf))
GOLDEN_DEPS   := tests/fixtures/golden/%/config.json tools/hf_to_gguf.py tools/gguf.py
GOLDEN_CONVERT = @mkdir -p $(dir $@); \
	$(PYTHON) tools/hf_to_gguf.py tests/fixtures/golden/$* $@ --type $(1) 2>$@.log \
	&& echo "  GOLDEN $@" || { cat $@.log; rm -f $@; exit 1; }

.PHONY: golden-fixtures
golden-fixtures: $(GOLDEN_GGUFS)
$(BUILD)/fixtures/%-f32.gguf: $(GOLDEN_DEPS)
	$(call GOLDEN_CONVERT,f32)
$(BUILD)/fixtures/%-f16.gguf: $(GOLDEN_DEPS)
	$(call GOLDEN_CONVERT,f16)
$(BUILD)/fixtures/%-q8_0.gguf: $(GOLDEN_DEPS)
	$(call GOLDEN_CONVERT,q8_0)
unit-test: golden-fixtures
unit-test: export OMNI_GOLDEN_DIR = $(BUILD)/fixtures
asan: golden-fixtures

# The embedding models of tests/fixtures/golden_embed/<case>/ (tools/make_embed_golden.py),
# converted the same way into $(BUILD)/fixtures/embed-<case>-{f32,f16,q8_0}.gguf
# (tests/test_bert.c; the qwen3 case is the decoder embedder's).
EMBED_GOLDEN_MODELS := $(notdir $(patsubst %/,%,$(dir $(wildcard tests/fixtures/golden_embed/*/config.json))))
EMBED_GOLDEN  := $(foreach m,$(EMBED_GOLDEN_MODELS),$(foreach t,f32 f16 q8_0,$(BUILD)/fixtures/embed-$(m)-$(t).gguf))
EMBED_DEPS    := tests/fixtures/golden_embed/%/config.json tools/hf_to_gguf.py tools/hf_bert.py tools/gguf.py
EMBED_CONVERT  = @mkdir -p $(dir $@); \
	$(PYTHON) tools/hf_to_gguf.py tests/fixtures/golden_embed/$* $@ --type $(1) 2>$@.log \
	&& echo "  GOLDEN $@" || { cat $@.log; rm -f $@; exit 1; }
golden-fixtures: $(EMBED_GOLDEN)
$(BUILD)/fixtures/embed-%-f32.gguf: $(EMBED_DEPS)
	$(call EMBED_CONVERT,f32)
$(BUILD)/fixtures/embed-%-f16.gguf: $(EMBED_DEPS)
	$(call EMBED_CONVERT,f16)
$(BUILD)/fixtures/embed-%-q8_0.gguf: $(EMBED_DEPS)
	$(call EMBED_CONVERT,q8_0)

# nomic-bert and jina-bert-v2 have no transformers class without remote code:
# tools/make_encoder_ref.py writes tiny GGUFs of both with numpy reference outputs.
ENCODER_REF := $(foreach c,nomic jina jina_fused,$(BUILD)/fixtures/embed-$(c)-f32.gguf)
golden-fixtures: $(ENCODER_REF)
$(ENCODER_REF): $(BUILD)/fixtures/embed-%-f32.gguf: tools/make_encoder_ref.py tools/gguf.py
	@mkdir -p $(dir $@)
	@$(PYTHON) tools/make_encoder_ref.py $(dir $@) --case $* 2>$@.log \
		&& echo "  GOLDEN $@" || { cat $@.log; rm -f $@; exit 1; }
golden-fixtures: $(BUILD)/fixtures/embed-broken.txt
$(BUILD)/fixtures/embed-broken.txt: tools/make_encoder_ref.py tools/gguf.py
	@mkdir -p $(dir $@)
	@$(PYTHON) tools/make_encoder_ref.py $(dir $@) --case broken 2>$@.log \
		&& echo "  GOLDEN $@" || { cat $@.log; rm -f $@; exit 1; }

# The tiny Whisper of tests/fixtures/whisper (tools/make_whisper_golden.py),
# converted by tools/hf_whisper_to_ggml.py for tests/test_whisper.c.
WHISPER_GOLDEN := $(foreach t,f32 f16 q8_0,$(BUILD)/fixtures/whisper-golden-$(t).bin)
golden-fixtures: $(WHISPER_GOLDEN)
$(BUILD)/fixtures/whisper-golden-%.bin: tests/fixtures/whisper/config.json tools/hf_whisper_to_ggml.py tools/hf_to_gguf.py
	@mkdir -p $(dir $@)
	@$(PYTHON) tools/hf_whisper_to_ggml.py tests/fixtures/whisper $@ --type $* 2>$@.log \
		&& echo "  GOLDEN $@" || { cat $@.log; rm -f $@; exit 1; }

# The tiny LLaVA and Idefics3 of tests/fixtures/vision (tools/make_vision_golden.py),
# converted by tools/hf_mmproj_to_gguf.py (mmproj + LM) for tests/test_vision.c.
VISION_GOLDEN := $(foreach m,llava idefics3,$(BUILD)/fixtures/vision-$(m)-mmproj-f32.gguf \
	$(BUILD)/fixtures/vision-$(m)-mmproj-f16.gguf)
golden-fixtures: $(VISION_GOLDEN)
$(BUILD)/fixtures/vision-%-mmproj-f16.gguf: tests/fixtures/vision/%/config.json tools/hf_mmproj_to_gguf.py tools/hf_to_gguf.py tools/gguf.py
	@mkdir -p $(dir $@)
	@$(PYTHON) tools/hf_mmproj_to_gguf.py tests/fixtures/vision/$* $@ --type f16 2>$@.log \
		&& echo "  GOLDEN $@" || { cat $@.log; rm -f $@; exit 1; }
$(BUILD)/fixtures/vision-%-mmproj-f32.gguf: tests/fixtures/vision/%/config.json tools/hf_mmproj_to_gguf.py tools/hf_to_gguf.py tools/gguf.py
	@mkdir -p $(dir $@)
	@$(PYTHON) tools/hf_mmproj_to_gguf.py tests/fixtures/vision/$* $@ --type f32 \
		--lm $(BUILD)/fixtures/vision-$*-lm-f32.gguf --lm-type f32 2>$@.log \
		&& echo "  GOLDEN $@" || { cat $@.log; rm -f $@; exit 1; }
# The tiny Qwen2.5-VL (tests/test_qwen2vl.c): mmproj + qwen2vl LM; the f16 mmproj through the
# pattern rule above.
VISION_QWEN := $(if $(wildcard tests/fixtures/vision/qwen2_5_vl/config.json),$(BUILD)/fixtures/vision-qwen2_5_vl-mmproj-f32.gguf \
	$(BUILD)/fixtures/vision-qwen2_5_vl-mmproj-f16.gguf)
golden-fixtures: $(VISION_QWEN)
$(BUILD)/fixtures/vision-qwen2_5_vl-mmproj-f32.gguf: tests/fixtures/vision/qwen2_5_vl/config.json tools/hf_mmproj_to_gguf.py tools/gguf.py
	@mkdir -p $(dir $@)
	@$(PYTHON) tools/hf_mmproj_to_gguf.py tests/fixtures/vision/qwen2_5_vl $@ --type f32 \
		--lm $(BUILD)/fixtures/vision-qwen2_5_vl-lm-f32.gguf --lm-type f32 2>$@.log \
		&& echo "  GOLDEN $@" || { cat $@.log; rm -f $@; exit 1; }

# The tiny Qwen3-VL (tests/test_qwen3vl.c): mmproj + qwen3vl LM through the pattern rules above.
VISION_QWEN3 := $(if $(wildcard tests/fixtures/vision/qwen3vl/config.json),$(BUILD)/fixtures/vision-qwen3vl-mmproj-f32.gguf \
	$(BUILD)/fixtures/vision-qwen3vl-mmproj-f16.gguf)
golden-fixtures: $(VISION_QWEN3)
VISION_QWEN3MOE := $(if $(wildcard tests/fixtures/vision/qwen3vlmoe/config.json),$(BUILD)/fixtures/vision-qwen3vlmoe-mmproj-f32.gguf)
golden-fixtures: $(VISION_QWEN3MOE)

# The tiny Gemma 3 (tests/test_vision_gemma3.c): mmproj + gemma3 LM through the pattern rules above.
VISION_GEMMA3 := $(if $(wildcard tests/fixtures/vision/gemma3/config.json),$(BUILD)/fixtures/vision-gemma3-mmproj-f32.gguf \
	$(BUILD)/fixtures/vision-gemma3-mmproj-f16.gguf)
golden-fixtures: $(VISION_GEMMA3)

# ---- fuzzing (tests/fuzz, libFuzzer) -----------------------------------------
# make fuzz [FUZZ_SECONDS=N] [FUZZ_TARGETS="fuzz_gguf fuzz_grammar"]: every
# tests/fuzz/fuzz_*.c built with clang, libFuzzer, ASan and UBSan under
# build-fuzz/, then run N seconds each on build-fuzz/corpus/<target> (seeded
# from tests/fuzz/corpus/<target>); executions and findings are printed and
# a finding fails the run (tests/fuzz/run.sh). make fuzz-smoke: the CI run, a
# fresh copy of each committed corpus replayed and fuzzed for a few seconds.
FUZZ_BUILD    := build-fuzz
FUZZ_CC       ?= clang
FUZZ_GCC      ?= gcc
FUZZ_SECONDS  ?= 10
# Smoke runs are bounded by a count of runs (FUZZ_SMOKE_RUNS, tests/fuzz/run.sh);
# these seconds only cap a target that got stuck.
FUZZ_SMOKE_SECONDS ?= 120
FUZZ_SAN      := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_BASE     := -std=gnu11 -O1 -g $(ARCH) -pthread -I. -fno-strict-aliasing -ffp-contract=off \
	$(shell pkg-config --cflags $(PKGS) 2>/dev/null)
FUZZ_CFLAGS   := $(FUZZ_BASE) -Wall -Wextra -Wno-unknown-pragmas -Wno-missing-field-initializers \
	-fsanitize=fuzzer-no-link $(FUZZ_SAN)
# clang 14 has no _Float16 on x86 and ignores `#pragma GCC target`: files that
# use either are built by gcc, with the same sanitizers but no coverage.
FUZZ_GCC_SRCS := $(shell grep -l -e _Float16 -e 'pragma GCC target' $(LIB_SRCS) 2>/dev/null)
FUZZ_GCC_CFLAGS := $(FUZZ_BASE) -Wall -Wextra -Wno-psabi $(FUZZ_SAN)
# No commands, server, engine or speech workers: no target enters through
# them, and the API targets bring stand-ins for them (tests/fuzz/fz_api.c).
FUZZ_LIB_SRCS := $(filter-out src/cli/% src/engine/% src/stt/% ws/ws_http.c ws/ws_socket.c,$(LIB_SRCS))
FUZZ_LIB_OBJS := $(FUZZ_LIB_SRCS:%.c=$(FUZZ_BUILD)/%.o) $(FUZZ_BUILD)/gen/web_files.o
FUZZ_TARGETS  ?= $(patsubst tests/fuzz/%.c,%,$(sort $(wildcard tests/fuzz/fuzz_*.c)))
FUZZ_BINS     := $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/%)
DEPS += $(FUZZ_LIB_OBJS:.o=.d) $(patsubst %.c,$(FUZZ_BUILD)/%.d,$(wildcard tests/fuzz/*.c)) \
	$(FUZZ_BUILD)/ws/ws_socket.d

.PHONY: fuzz fuzz-build fuzz-smoke
fuzz-build: $(FUZZ_BINS)
fuzz: fuzz-build
	sh tests/fuzz/run.sh --seconds $(FUZZ_SECONDS) $(FUZZ_BINS)
fuzz-smoke: fuzz-build
	sh tests/fuzz/run.sh --smoke --seconds $(FUZZ_SMOKE_SECONDS) $(FUZZ_BINS)

$(FUZZ_BUILD)/.flags: FORCE
	@mkdir -p $(FUZZ_BUILD)
	@echo '$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_GCC) $(FUZZ_GCC_CFLAGS) $(LDLIBS)' | cmp -s - $@ || \
		echo '$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_GCC) $(FUZZ_GCC_CFLAGS) $(LDLIBS)' > $@
$(FUZZ_BUILD)/%.o: %.c $(FUZZ_BUILD)/.flags
	@mkdir -p $(dir $@)
	$(if $(filter $<,$(FUZZ_GCC_SRCS)),$(FUZZ_GCC) $(FUZZ_GCC_CFLAGS),$(FUZZ_CC) $(FUZZ_CFLAGS)) -MMD -MP -c $< -o $@
$(FUZZ_BUILD)/gen/web_files.o: $(FUZZ_BUILD)/gen/web_files.c $(FUZZ_BUILD)/.flags
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@
$(FUZZ_BUILD)/libomni.a: $(FUZZ_LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^
# The API targets link fz_api.o's stand-ins for transport, engine, model and
# speech ahead of the library, so those members are never pulled from it.
$(FUZZ_BUILD)/fuzz_api_%: $(FUZZ_BUILD)/tests/fuzz/fuzz_api_%.o $(FUZZ_BUILD)/tests/fuzz/fz_api.o \
		$(FUZZ_BUILD)/tests/fuzz/fz_util.o $(FUZZ_BUILD)/libomni.a
	$(FUZZ_CC) -fsanitize=fuzzer $(FUZZ_SAN) -o $@ $^ $(LDLIBS)
$(FUZZ_BUILD)/fuzz_%: $(FUZZ_BUILD)/tests/fuzz/fuzz_%.o $(FUZZ_BUILD)/tests/fuzz/fz_util.o \
		$(FUZZ_BUILD)/libomni.a
	$(FUZZ_CC) -fsanitize=fuzzer $(FUZZ_SAN) -o $@ $^ $(LDLIBS)
# WebSocket framing without the HTTP server: the target brings ws_server_submit.
$(FUZZ_BUILD)/fuzz_ws_socket: $(FUZZ_BUILD)/tests/fuzz/fuzz_ws_socket.o $(FUZZ_BUILD)/ws/ws_socket.o \
		$(FUZZ_BUILD)/tests/fuzz/fz_util.o $(FUZZ_BUILD)/libomni.a
	$(FUZZ_CC) -fsanitize=fuzzer $(FUZZ_SAN) -o $@ $^ $(LDLIBS)

# ---- samples ----------------------------------------------------------------
# samples/mic_transcribe.c, samples/voice_agent.c: realtime WebSocket clients
# (samples/rt_client.c) with the microphone; portaudio is linked here only.
SAMPLES := $(BUILD)/samples/mic_transcribe $(BUILD)/samples/voice_agent
.PHONY: samples
samples: $(SAMPLES)
$(SAMPLES:=.o): CFLAGS += $(shell pkg-config --cflags portaudio-2.0 2>/dev/null)
$(BUILD)/samples/%: $(BUILD)/samples/%.o $(BUILD)/samples/rt_client.o $(BUILD)/libomni.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(shell pkg-config --libs portaudio-2.0 2>/dev/null)
DEPS += $(SAMPLES:=.d) $(BUILD)/samples/rt_client.d

-include $(DEPS)

# ---- CUDA backend (docs/gpu.md; issue 19) -----------------------------------
# make CUDA=1 [CUDA_ARCH=90a] [CUDA_HOME=/usr/local/cuda]: src/core/cuda/*.cu
# compiled by nvcc into libomni.a (SASS for CUDA_ARCH plus compute_80 PTX that
# newer cards JIT), OMNI_HAVE_CUDA defined, cudart + cuBLAS linked. Without
# CUDA=1 nothing here changes the build.
# make test-cuda: $(BUILD)/test_cuda - tests/test_model_dev.c (the device
# forward against llm_forward on the golden fixtures and stories260K) and the
# test runner over only what the forward needs (no server libraries), run
# with OMNI_DEV_BACKEND=cuda. BLAS_SHIM=1 links a plain sgemm in place of
# OpenBLAS (machines without its headers: add -Itools/bench_only to
# EXTRA_CFLAGS); DEV_LIBS: the libraries it links (pcre2, BLAS, ...);
# NVCC_EXTRA: more nvcc flags (e.g. -DOMNI_CUDA_NO_F16_CACHE).
CUDA_HOME ?= /usr/local/cuda
CUDA_ARCH ?= 90a
NVCC      ?= $(CUDA_HOME)/bin/nvcc
CUDA_SRCS := $(sort $(wildcard src/core/cuda/*.cu))
CUDA_OBJS := $(if $(CUDA),$(CUDA_SRCS:%.cu=$(BUILD)/%.o))
CUDA_LIBS := $(if $(CUDA),-L$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart -lstdc++ -ldl -lrt)
ifneq ($(CUDA),)
CFLAGS    += -DOMNI_HAVE_CUDA
LDLIBS    += $(CUDA_LIBS)
NVCCFLAGS ?= -O3 -std=c++17 -I. -lineinfo --expt-relaxed-constexpr \
	-gencode arch=compute_$(CUDA_ARCH),code=sm_$(CUDA_ARCH) \
	-gencode arch=compute_80,code=compute_80 -Xcompiler -Wall,-Wextra
$(BUILD)/libomni.a: $(CUDA_OBJS)
$(BUILD)/%.o: %.cu $(BUILD)/.flags
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(NVCC_EXTRA) -MMD -MP -c $< -o $@
DEPS += $(CUDA_OBJS:.o=.d)
endif
ENGINE_DEV_LIB_SRCS := src/engine/engine.c src/engine/kv_pool.c src/engine/prefix_store.c \
	llm/grammar/grammar.c llm/sampler.c
DEV_LIB_SRCS := llm/model.c llm/model_dev.c llm/moe.c llm/tokenizer.c llm/unicode.c $(wildcard llm/deltanet.c) \
	$(filter-out src/core/download.c,$(sort $(wildcard src/core/*.c))) \
	$(sort $(wildcard src/core/arch/x86/*.c))
DEV_TEST_OBJS := $(BUILD)/tests/test_model_dev.o $(BUILD)/tests/test_engine_dev.o $(BUILD)/tests/test_attention_dev.o \
	$(BUILD)/tests/test_main.o $(ENGINE_DEV_LIB_SRCS:%.c=$(BUILD)/%.o) \
	$(DEV_LIB_SRCS:%.c=$(BUILD)/%.o) $(if $(BLAS_SHIM),$(BUILD)/tests/cuda/blas_shim.o) $(CUDA_OBJS)
DEV_LIBS ?= $(shell pkg-config --libs libpcre2-8 openblas 2>/dev/null) -lm -pthread
$(BUILD)/test_cuda: $(DEV_TEST_OBJS)
	$(CC) $(LDFLAGS) -o $@ $^ $(DEV_LIBS) $(CUDA_LIBS)
STORIES_GGUF := $(if $(wildcard ../shared/models/stories260K/stories260K.bin),$(BUILD)/fixtures/stories260K.gguf)
.PHONY: test-cuda
CUDA_TEST_GGUFS := $(foreach m,llama llama3 qwen2 qwen3,$(foreach t,f32 f16 q8_0,$(BUILD)/fixtures/$(m)-$(t).gguf)) \
	$(BUILD)/fixtures/gemma2-f32.gguf $(STORIES_GGUF)
test-cuda: $(BUILD)/test_cuda $(if $(CUDA_GOLDEN),,$(CUDA_TEST_GGUFS))
	OMNI_DEV_BACKEND=$(if $(CUDA),cuda,cpu) OMNI_GOLDEN_DIR=$(or $(CUDA_GOLDEN),$(BUILD)/fixtures) \
		$(BUILD)/test_cuda
# stories260K (../shared) as GGUF beside the golden fixtures, for test_model_dev
golden-fixtures: $(STORIES_GGUF)
$(BUILD)/fixtures/stories260K.gguf: tools/llama2c_to_gguf tools/gguf.py
	@mkdir -p $(dir $@)
	@$(PYTHON) tools/llama2c_to_gguf ../shared/models/stories260K/stories260K.bin \
		../shared/models/stories260K/tok512.bin $@ >$@.log 2>&1 \
		&& echo "  GOLDEN $@" || { cat $@.log; rm -f $@; exit 1; }
# bench_dev: pp/tg of the device forward (tests/cuda/bench_dev.c, docs/gpu.md)
DEV_LIB_OBJS := $(DEV_LIB_SRCS:%.c=$(BUILD)/%.o) $(if $(BLAS_SHIM),$(BUILD)/tests/cuda/blas_shim.o) $(CUDA_OBJS)
$(BUILD)/bench_dev: $(BUILD)/tests/cuda/bench_dev.o $(DEV_LIB_OBJS)
	$(CC) $(LDFLAGS) -o $@ $^ $(DEV_LIBS) $(CUDA_LIBS)
DEPS += $(BUILD)/tests/cuda/bench_dev.d
# bench_mv: GB/s of the one-row products per weight shape (tests/cuda/bench_mv.c)
$(BUILD)/bench_mv: $(BUILD)/tests/cuda/bench_mv.o $(DEV_LIB_OBJS)
	$(CC) $(LDFLAGS) -o $@ $^ $(DEV_LIBS) $(CUDA_LIBS)
DEPS += $(BUILD)/tests/cuda/bench_mv.d
# bench_engine_dev: `omniserve bench-engine` alone (tests/cuda/bench_engine_dev.c):
# the engine and the forward, no server libraries (--device cuda on a GPU
# machine without our Debian packages)
ENGINE_DEV_SRCS := $(ENGINE_DEV_LIB_SRCS) src/cli/bench_engine.c src/cli/args.c src/cli/bench_util.c
ENGINE_DEV_OBJS := $(ENGINE_DEV_SRCS:%.c=$(BUILD)/%.o)
$(BUILD)/bench_engine_dev: $(BUILD)/tests/cuda/bench_engine_dev.o $(ENGINE_DEV_OBJS) $(DEV_LIB_OBJS)
	$(CC) $(LDFLAGS) -o $@ $^ $(DEV_LIBS) $(CUDA_LIBS)
DEPS += $(BUILD)/tests/cuda/bench_engine_dev.d
