# Thin wrapper: meson/ninja do the building, scripts in tools/ do the rest.
#   make / make build   install missing Debian packages, configure + build build/
#   make demo           build, then run $(DEMO) with build/nabla
#   make test           build build/ (release), build-asan/ (ASan+UBSan, debug)
#                       and, when clang is there, build-fuzz/ (libFuzzer), then
#                       run tools/run-tests.sh (last line: "N passed, N failed, N skipped")
#   make bench          build, then bench/run.sh (BENCH_ARGS="--record" to save results)
#   make clean          remove the build directories
MESON ?= meson
# ccache (when installed) fronts nvcc and clang++ for the CUDA module: with the
# checkout as its base directory, build/ and build-asan/ compile the module's
# .cu files with identical relative command lines, so the second build reuses
# the first one's objects (they are not instrumented in either).
export CCACHE_BASEDIR ?= $(CURDIR)
NINJA ?= ninja
DEMO  ?= examples/digits.nbl
BENCH_ARGS ?=

ASAN_OPTS := -Dbuildtype=debug -Db_sanitize=address,undefined -Db_lundef=false
# The whole fuzz build is instrumented (ASan/UBSan + coverage without the
# libFuzzer main); tests/fuzz/meson.build links the targets with -fsanitize=fuzzer.
# No fuzz target loads the CUDA module, so that build leaves it out.
FUZZ_OPTS := -Dfuzz=true -Dcuda=disabled -Dbuildtype=debugoptimized -Db_sanitize=address,undefined \
             -Db_lundef=false -Dc_args=-fsanitize=fuzzer-no-link
FUZZ_CC   := clang

# setup DIR, ENV, OPTIONS: configure DIR unless it already is (a half-made dir is redone)
setup = test -f $(1)/build.ninja || { rm -rf $(1) && $(2) $(MESON) setup $(1) $(3); }

.PHONY: all build deps demo test bench clean build-release build-asan build-fuzz

all: build

deps:
	@tools/install-deps.sh

build: build-release

build-release: deps
	@$(call setup,build,,)
	$(NINJA) -C build

build-asan: deps
	@$(call setup,build-asan,,$(ASAN_OPTS))
	$(NINJA) -C build-asan

build-fuzz: deps
	@if command -v $(FUZZ_CC) >/dev/null 2>&1; then \
	  $(call setup,build-fuzz,CC=$(FUZZ_CC),$(FUZZ_OPTS)) && $(NINJA) -C build-fuzz; \
	else \
	  echo "note: $(FUZZ_CC) not found; build-fuzz/ (libFuzzer targets) skipped"; \
	fi

demo: build-release
	./build/nabla $(DEMO)

test: build-release build-asan build-fuzz
	tools/run-tests.sh

bench: build-release
	bench/run.sh $(BENCH_ARGS)

clean:
	rm -rf build build-asan build-fuzz
