# The two commands of the README's quick start, and what they need.
#   make run   installs what is missing, builds, and runs `isohost footprint`
#   make test  installs what is missing, builds, and runs every test (plain, ASan+UBSan, TSan)

BUILD ?= build
JOBS ?= $(shell nproc)
PYTHON ?= /usr/bin/python3
CMAKE_FLAGS ?=

.PHONY: setup build run test test-plain test-asan test-tsan test-python test-comfyui test-fuzz fuzz tidy clean

setup:
	@scripts/setup

build: setup
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS) >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

run: build
	$(BUILD)/isohost footprint

test: test-plain test-python test-comfyui test-asan test-tsan test-fuzz

test-plain: build
	cd $(BUILD) && ctest --output-on-failure --timeout 300

# The worker runtime alone, then the Python host API (the isohost package built in $(BUILD)),
# then chaos over real `serve` hosts (tests/chaos: random kill -9s, about a minute), then the
# live view (tests/live: `top` in tmux, a real Prometheus scraping, the page in Chromium).
test-python: build
	$(PYTHON) -m pytest tests/python -q
	ISOHOST_BUILD_PYTHON=$(abspath $(BUILD))/python $(PYTHON) -m pytest tests/python_host -q
	ISOHOST_BINARY=$(abspath $(BUILD))/isohost $(PYTHON) -m pytest tests/chaos -q -s
	ISOHOST_BINARY=$(abspath $(BUILD))/isohost $(PYTHON) -m pytest tests/live -q

# A real ComfyUI on 127.0.0.1 with the adapter (docs/comfyui.md), in the virtual environments
# scripts/comfyui-envs makes from PyPI (ComfyUI's requirements; the isolated pack's numpy 1.26);
# first, the worker's torch features (tests/torch: sleep) with that environment's torch.
test-comfyui: build
	@scripts/setup --comfyui
	ISOHOST_BINARY=$(abspath $(BUILD))/isohost .venv/comfyui/bin/python -m pytest tests/torch -q
	ISOHOST_BUILD_PYTHON=$(abspath $(BUILD))/python .venv/comfyui/bin/python -m pytest tests/comfyui -q

# Sanitizer builds run the C++ suite again; the workers are plain Python either way.
# tests/tsan.supp says why its one suppression is a false positive.
test-asan: setup
	cmake -S . -B $(BUILD)-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DISOHOST_SANITIZE=address >/dev/null
	cmake --build $(BUILD)-asan -j $(JOBS)
	cd $(BUILD)-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
		ctest --output-on-failure --timeout 600

test-tsan: setup
	cmake -S . -B $(BUILD)-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DISOHOST_SANITIZE=thread >/dev/null
	cmake --build $(BUILD)-tsan -j $(JOBS)
	cd $(BUILD)-tsan && TSAN_OPTIONS="halt_on_error=1 suppressions=$(CURDIR)/tests/tsan.supp" ctest --output-on-failure --timeout 600

# libFuzzer over what the host parses from peers (tests/fuzz): frames and control lines, each
# for FUZZ_SECONDS from the corpus in the repo. New inputs and any crash go to a temporary
# directory, named on failure; `make fuzz` runs ten minutes each.
FUZZ_SECONDS ?= 45
FUZZERS = frames request_line
test-fuzz: setup
	cmake -S tests/fuzz -B $(BUILD)-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ >/dev/null
	cmake --build $(BUILD)-fuzz -j $(JOBS)
	@out=$$(mktemp -d); trap 'rm -rf "$$out"' EXIT; for f in $(FUZZERS); do \
	  mkdir -p $$out/$$f; \
	  $(BUILD)-fuzz/fuzz_$$f -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	    -artifact_prefix=$(CURDIR)/$(BUILD)-fuzz/crash-$$f- $$out/$$f tests/fuzz/corpus/$$f \
	    > $$out/$$f.log 2>&1 || { tail -40 $$out/$$f.log; exit 1; }; \
	  echo "fuzz_$$f: $$(sed -n 's/stat::number_of_executed_units: *//p' $$out/$$f.log) runs in $(FUZZ_SECONDS) s, no crash"; \
	done

fuzz:
	$(MAKE) test-fuzz FUZZ_SECONDS=600

# clang-tidy over src/ (.clang-tidy: advice, not a gate), with the compile database of a clang
# configure: $(BUILD)'s holds GCC's own flags (-Wno-restrict, -fno-gnu-unique), errors to it.
tidy: setup
	cmake -S . -B $(BUILD)-tidy -G Ninja -DCMAKE_CXX_COMPILER=clang++ >/dev/null
	bash -o pipefail -c "find src -name '*.cpp' | sort | xargs -P $(JOBS) -n 4 \
	  clang-tidy -p $(BUILD)-tidy --quiet 2>&1 | { grep -v ' generated\.$$' || true; }"

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-tsan $(BUILD)-fuzz $(BUILD)-tidy
