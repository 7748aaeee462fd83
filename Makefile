# SPDX-License-Identifier: MIT
# The two Quick-start commands (README): `make run` and `make test`. Both install missing Debian packages first.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=
ARGS ?=

.PHONY: all setup configure build run test bench clean

all: build

setup:
	@scripts/setup-debian.sh

configure: setup
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The default simulation: 65,536-body Plummer sphere, tree solver, to t = 1; output in matcha-out/.
# Without ARGS it is the demo: it replaces matcha-out/ of an earlier plain `make run` (--overwrite removes only
# matcha's own files). With ARGS the run folder is protected as for any run: pass --overwrite yourself.
run: build
	$(BUILD)/apps/matcha run $(if $(strip $(ARGS)),$(ARGS),--overwrite)

# Every test (GPU tests skip, saying so, where there is no GPU).
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

bench: build
	scripts/bench.sh $(BUILD)

clean:
	rm -rf $(BUILD)
