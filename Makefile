# cellbox — build, run, test, bench.
#   make run    install missing apt packages, build, start cellboxd on 127.0.0.1:8888
#   make test   install what tests need, build, run every test (unit, ASan/UBSan, integration, clients)
#   make bench  benchmarks side by side with Jupyter Server

PYTHON      := /usr/bin/python3
BUILD       ?= build
SANITIZE    ?=
CC          ?= cc
PKGS        := libmicrohttpd jansson libcrypto libseccomp libarchive zlib libcurl libnftables libnl-route-3.0
# Flags come from pkg-config the first time a recipe uses them, never when make starts: on a bare
# machine the packages that provide them are not there yet, and a flag read at start stays empty
# for the whole run (the link then fails with undefined references). `run`, `test` and `bench`
# install first and build in a second make, which reads the flags then.
# $(call pkg_config,KEY,ARGS): pkg-config's answer to ARGS, asked once and kept in pkg_config.KEY.
pkg_config   = $(if $(filter undefined,$(origin pkg_config.$(1))),$(eval pkg_config.$(1) := $(shell \
               /usr/bin/pkg-config $(2) 2>/dev/null || echo __missing__)))$(if $(filter __missing__,$(pkg_config.$(1))),$(error \
               pkg-config $(2) failed: the packages are missing; run `make deps` (or `make run`, \
               `make test`, which install them first)))$(pkg_config.$(1))
PY_CFLAGS    = $(call pkg_config,python_cflags,--cflags python-3.11-embed)
PY_LIBS      = $(call pkg_config,python_libs,--libs python-3.11-embed)
DEP_CFLAGS   = $(call pkg_config,daemon_cflags,--cflags $(PKGS))
DEP_LIBS     = $(call pkg_config,daemon_libs,--libs $(PKGS)) -lwslay
CFLAGS      ?= -O2 -g
CFLAGS      += -std=gnu11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter \
               -Isrc -fno-strict-aliasing $(DEP_CFLAGS)
ifneq ($(SANITIZE),)
CFLAGS      += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS     += -fsanitize=address,undefined
endif

DAEMON_SRCS := $(wildcard src/common/*.c src/http/*.c src/api/*.c src/kernel/*.c src/model/*.c src/sandbox/*.c src/daemon/*.c)
DAEMON_MAIN := src/daemon/main.c
LIB_SRCS    := $(filter-out $(DAEMON_MAIN),$(DAEMON_SRCS))
# The Jupyter bridge, a program of its own: libzmq and OpenSSL stay out of the Python kernel.
BRIDGE_SRCS := src/runtime/jupyter_bridge_main.c src/runtime/jupyter_bridge.c src/runtime/jupyter_wire.c \
               src/runtime/kernel_channel.c src/runtime/kernel_child.c src/runtime/jupyter_message.c
# Every other file of runtime/ but pid 1's (cellbox-init, below).
KERNEL_SRCS := $(filter-out src/runtime/init_main.c src/runtime/jupyter_bridge_main.c src/runtime/jupyter_bridge.c \
               src/runtime/jupyter_wire.c,$(wildcard src/runtime/*.c))
# The zygote enters sandboxes itself: it shares the daemon's sandbox code, built without sanitizers.
KERNEL_SHARED := src/sandbox/sandbox.c src/sandbox/rootfs.c src/sandbox/landlock.c src/sandbox/seccomp_filter.c \
                 src/sandbox/supervisor.c src/sandbox/process_image.c
UNIT_SRCS   := $(wildcard tests/unit/test_*.c)
CLI_SRCS    := $(wildcard src/cli/*.c)
CLI_LIBS     = $(call pkg_config,cli_libs,--libs libcurl jansson libarchive)

OBJ         = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
BIN         := $(BUILD)/bin
SHARE       := $(BUILD)/share/cellbox
PY_FILES    := $(wildcard src/runtime/python/cellbox_kernel/*.py) src/runtime/python/no_network_sitecustomize.py
PY_OUT      := $(patsubst src/runtime/python/%,$(SHARE)/python/%,$(PY_FILES))
# The JavaScript and TypeScript kernel (language_host.c runs it with Node).
NODE_FILES  := $(wildcard src/runtime/node/*.js)
NODE_OUT    := $(patsubst src/runtime/node/%,$(SHARE)/node/%,$(NODE_FILES))
SPEC_FILES  := $(wildcard src/runtime/kernelspecs/*/*)
SPEC_OUT    := $(patsubst src/runtime/kernelspecs/%,$(SHARE)/kernelspecs/%,$(SPEC_FILES))
UNIT_BINS   := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRCS))

.PHONY: all build run test deps test-deps unit layers asan integration api cli pyclient clients security bench clean format
all: build
build: $(BIN)/cellboxd $(BIN)/cellbox $(BIN)/cellbox-kernel $(BIN)/cellbox-jupyter-bridge $(BIN)/cellbox-init $(PY_OUT) $(NODE_OUT) $(SPEC_OUT)

$(BUILD)/obj/src/runtime/%.o: src/runtime/%.c
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -fsanitize=address%,$(CFLAGS)) $(PY_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BIN)/cellboxd: $(call OBJ,$(DAEMON_SRCS))
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(DEP_LIBS)

# The command-line client: libcurl, jansson and libarchive (a build's context tar), nothing of
# the daemon's.
$(BIN)/cellbox: $(call OBJ,$(CLI_SRCS))
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(CLI_LIBS)

# The kernel embeds CPython; it is never built with ASan (CPython's allocator and ASan's
# interceptors do not mix in an embedded interpreter).
$(BUILD)/obj-kernel/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -fsanitize=address%,$(CFLAGS)) -MMD -MP -c $< -o $@

$(BIN)/cellbox-kernel: $(call OBJ,$(KERNEL_SRCS)) $(patsubst %.c,$(BUILD)/obj-kernel/%.o,$(KERNEL_SHARED))
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(PY_LIBS) -ljansson -lseccomp

$(BIN)/cellbox-jupyter-bridge: $(call OBJ,$(BRIDGE_SRCS))
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ -ljansson -lzmq -lcrypto

# pid 1 of every sandbox: static, libc only (exec'd once per sandbox; see supervisor.h).
$(BIN)/cellbox-init: $(BUILD)/obj-kernel/src/runtime/init_main.o $(BUILD)/obj-kernel/src/sandbox/supervisor.o
	@mkdir -p $(dir $@)
	$(CC) -static -o $@ $^

$(SHARE)/python/%: src/runtime/python/%
	@mkdir -p $(dir $@)
	cp $< $@

$(SHARE)/node/%: src/runtime/node/%
	@mkdir -p $(dir $@)
	cp $< $@

$(SHARE)/kernelspecs/%: src/runtime/kernelspecs/%
	@mkdir -p $(dir $@)
	cp $< $@

# hot_pages and huge_code belong to the kernel binary; their tests build them in, with the
# sanitizers.
$(BUILD)/tests/test_hot_pages: tests/unit/test_hot_pages.c src/runtime/hot_pages.c src/runtime/hot_pages.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.c,$^)

$(BUILD)/tests/test_huge_code: tests/unit/test_huge_code.c src/runtime/huge_code.c src/runtime/huge_code.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.c,$^)

$(BUILD)/tests/%: tests/unit/%.c $(call OBJ,$(LIB_SRCS))
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(DEP_LIBS)

# A command runner that refuses io_uring, for the tests of the zygote's way without it.
TEST_TOOLS := $(BUILD)/tests/without-io-uring $(BUILD)/tests/network-dns-driver \
              $(BUILD)/tests/template-layer-driver
$(BUILD)/tests/without-io-uring: tests/tools/without_io_uring.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< -lseccomp

# sandbox/network_dns.c on the loop, driven from stdin by tests/integration/test_network_dns.py.
$(BUILD)/tests/network-dns-driver: tests/tools/network_dns_driver.c $(call OBJ,$(LIB_SRCS))
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(DEP_LIBS)

# One template build step (a layer, its writable view, a sandbox, the commit), without the
# daemon, for tests/integration/test_templates_store.py.
$(BUILD)/tests/template-layer-driver: tests/tools/template_layer_driver.c $(call OBJ,$(LIB_SRCS))
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(DEP_LIBS)

# The host's per-page costs, printed beside make bench's figures (bench/pagecost.c).
$(BUILD)/bench/pagecost: bench/pagecost.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $<

deps:
	@scripts/install-deps.sh run

test-deps:
	@scripts/install-deps.sh test

# run, test and bench install before anything else, then build in a second make (see the top):
# as prerequisites the install would run beside the build under -j.
run:
	@scripts/install-deps.sh run
	@$(MAKE) --no-print-directory build
	@scripts/run.sh

unit: $(UNIT_BINS)
	@scripts/run-unit.sh $(UNIT_BINS)

# The rules between src/ folders (scripts/check-layers.sh): fails naming the file and line.
# LAYERS_FLAGS=--warn-only reports without failing. tests/layers checks the check itself.
LAYERS_FLAGS ?=
layers:
	@scripts/check-layers.sh $(LAYERS_FLAGS)

asan:
	@$(MAKE) --no-print-directory BUILD=build-asan SANITIZE=1 build unit

integration: build $(TEST_TOOLS)
	@CELLBOX_BUILD=$(CURDIR)/$(BUILD) $(PYTHON) -m pytest -q -p no:cacheprovider tests/integration

clients: test-deps
	@$(MAKE) --no-print-directory build
	@CELLBOX_BUILD=$(CURDIR)/$(BUILD) $(PYTHON) -m pytest -q -p no:cacheprovider tests/clients

api: build
	@CELLBOX_BUILD=$(CURDIR)/$(BUILD) $(PYTHON) -m pytest -q -p no:cacheprovider tests/api

cli: build
	@CELLBOX_BUILD=$(CURDIR)/$(BUILD) $(PYTHON) -m pytest -q -p no:cacheprovider tests/cli

pyclient: build
	@CELLBOX_BUILD=$(CURDIR)/$(BUILD) $(PYTHON) -m pytest -q -p no:cacheprovider tests/pyclient tests/examples

security: build
	@CELLBOX_BUILD=$(CURDIR)/$(BUILD) $(PYTHON) -m pytest -q -p no:cacheprovider tests/security

test:
	@# The layering check first (scripts/check-layers.sh): a broken rule fails make test.
	@$(MAKE) --no-print-directory layers
	@scripts/install-deps.sh test
	@$(MAKE) --no-print-directory build unit $(TEST_TOOLS) fuzz-replay
	@$(MAKE) --no-print-directory asan
	@CELLBOX_BUILD=$(CURDIR)/$(BUILD) CELLBOX_DAEMON=$(CURDIR)/build-asan/bin/cellboxd \
		$(PYTHON) -m pytest -q -p no:cacheprovider tests/layers tests/kernel tests/integration tests/api tests/cli tests/pyclient tests/examples tests/security tests/clients

# ---- fuzzing (tests/fuzz/, docs/security.md "Fuzzing") ----
# libFuzzer harnesses built with clang, ASan and UBSan over the daemon's modules (every one but
# http/server.c: the request harnesses bring http_stub.c instead, and --wrap keeps sandboxes
# from being started). make fuzz runs each for FUZZ_SECONDS and merges what it found into its
# corpus; make fuzz-replay runs each corpus once (make test does).
FUZZ_BUILD   := build-fuzz
FUZZ_CC      := clang
FUZZ_SECONDS ?= 180
FUZZ_TARGETS := routing json_bodies websocket framing kernel_frames
FUZZ_STUBBED := routing json_bodies
# (clang finds missing initializers in libseccomp's SCMP_A0 macro, which gcc does not.)
FUZZ_CFLAGS   = -g -O1 -std=gnu11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter \
                -Wno-missing-field-initializers \
                -Isrc -Itests/fuzz -fno-strict-aliasing $(DEP_CFLAGS) -fno-omit-frame-pointer \
                -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_LIB     := $(FUZZ_BUILD)/libcellbox.a
FUZZ_WRAP    := -Wl,--wrap=manager_create,--wrap=stateless_run_start,--wrap=manager_default_kernel
FUZZ_BINS    := $(patsubst %,$(FUZZ_BUILD)/bin/fuzz_%,$(FUZZ_TARGETS))

$(FUZZ_BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ_LIB): $(patsubst %.c,$(FUZZ_BUILD)/obj/%.o,$(filter-out src/http/server.c,$(LIB_SRCS)))
	rm -f $@ && ar rcs $@ $^

$(patsubst %,$(FUZZ_BUILD)/bin/fuzz_%,$(FUZZ_STUBBED)): $(FUZZ_BUILD)/bin/fuzz_%: \
		$(FUZZ_BUILD)/obj/tests/fuzz/fuzz_%.o $(FUZZ_BUILD)/obj/tests/fuzz/http_stub.o $(FUZZ_LIB)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $(FUZZ_WRAP) -o $@ $^ $(DEP_LIBS)

$(patsubst %,$(FUZZ_BUILD)/bin/fuzz_%,$(filter-out $(FUZZ_STUBBED),$(FUZZ_TARGETS))): $(FUZZ_BUILD)/bin/fuzz_%: \
		$(FUZZ_BUILD)/obj/tests/fuzz/fuzz_%.o $(FUZZ_LIB)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $^ $(DEP_LIBS)

# The request harnesses load the real kernelspecs, found beside the binary as the daemon finds
# them (kernelspec_init): the kernel runtime of $(BUILD) is linked in.
.PHONY: fuzz fuzz-build fuzz-replay
fuzz-build: build $(FUZZ_BINS)
	@ln -sfn $(CURDIR)/$(BIN)/cellbox-kernel $(FUZZ_BUILD)/bin/cellbox-kernel
	@ln -sfn $(CURDIR)/$(BUILD)/share $(FUZZ_BUILD)/share

# Like run and test: install first, then build in a second make that reads the flags.
fuzz:
	@scripts/install-deps.sh test
	@$(MAKE) --no-print-directory fuzz-build
	@scripts/fuzz.sh run $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# make test's second make runs this, after the install.
fuzz-replay: fuzz-build
	@scripts/fuzz.sh replay 0 $(FUZZ_TARGETS)

-include $(shell find $(FUZZ_BUILD)/obj -name '*.d' 2>/dev/null)

bench:
	@scripts/install-deps.sh bench
	@$(MAKE) --no-print-directory build $(BUILD)/bench/pagecost
	@$(PYTHON) bench/bench.py

format:
	clang-format -i $(DAEMON_SRCS) $(KERNEL_SRCS) $(CLI_SRCS) $(UNIT_SRCS) $(wildcard src/*/*.h)

clean:
	rm -rf build build-asan $(FUZZ_BUILD)

-include $(shell find $(BUILD)/obj $(BUILD)/obj-kernel -name '*.d' 2>/dev/null)

# make soak: 200 WebSocket clients with a cell a second for 10 minutes beside 1000 create/delete
# cycles; errors, round trips, the daemon's fds and RSS before, during and after (bench/soak.py).
# Shorter: make soak SOAK_MINUTES=2 SOAK_CYCLES=200.
SOAK_MINUTES ?= 10
SOAK_CLIENTS ?= 200
SOAK_KERNELS ?= 20
SOAK_CYCLES  ?= 1000
.PHONY: soak
soak:
	@scripts/install-deps.sh bench
	@$(MAKE) --no-print-directory build
	@$(PYTHON) bench/soak.py --minutes $(SOAK_MINUTES) --clients $(SOAK_CLIENTS) \
		--kernels $(SOAK_KERNELS) --cycles $(SOAK_CYCLES)
