# limitbed — a thin dispatcher: the logic lives in scripts/ and in each component's own Makefile.
# `make help` lists the targets.

SHELL := /bin/bash
ROOT := $(abspath .)
# Build output; sanitizer builds go to their own directory so the two never mix. OUT is taken
# from the command line only (never from the environment), so a sanitizer run started from
# within another make cannot write into the plain build directory.
SAN ?=
OUT := $(if $(filter command line,$(origin OUT)),$(OUT),$(ROOT)/$(if $(SAN),build-san,build))

C_COMPONENTS := $(foreach d,fakegpu hamicore harness/memjudge/memload,$(if $(wildcard $(d)/Makefile),$(d)))

.PHONY: help build c go test test-c test-go test-san test-tsan abi-check bench matrix e2e node-image images gpu-bundle clean

help: ## list the targets
	@grep -hE '^[a-z][a-z0-9-]*:.*## ' $(MAKEFILE_LIST) | sort | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: c go ## build everything (C libraries, tools and Go binaries)

c: ## build the C libraries and tools into $(OUT) (SAN=address,undefined for sanitizers), and regiondump
	@for d in $(C_COMPONENTS); do $(MAKE) -s -C $$d OUT=$(OUT) SAN=$(SAN) || exit 1; done
	@# regiondump (Go, static: it is also mounted into workload containers) prints a usage.cache.
	@mkdir -p $(OUT)/bin && CGO_ENABLED=0 go build -trimpath -o $(OUT)/bin/regiondump ./plugin/cmd/regiondump

go: ## build the Go binaries into $(OUT)/bin
	@scripts/build-go.sh $(OUT)/bin

test: ## run every test tier this machine supports (what CI runs)
	@scripts/test.sh

test-c: c ## C unit and preload tests
	@for d in $(C_COMPONENTS); do $(MAKE) -s -C $$d test OUT=$(OUT) SAN=$(SAN) || exit 1; done

test-go: ## Go tests with -race
	@scripts/test-go.sh

test-san: ## the C tests under AddressSanitizer and UndefinedBehaviorSanitizer
	@$(MAKE) -s test-c SAN=address,undefined

test-tsan: ## the threaded C path programs (threads, fork) under ThreadSanitizer
	@$(MAKE) -s -C hamicore test-tsan OUT=$(ROOT)/build-san

abi-check: ## compare our CUDA/NVML declarations with the real headers
	@scripts/abi-check.sh

bench: ## benchmarks (results go to docs/benchmarks.md by hand, with the command)
	@scripts/bench.sh

# A real release in the matrix: CORE_OLD=libvgpu.so PLUGIN_OLD=nvidia-device-plugin PLUGIN_OLD_ARGS='...';
# CORE_LINK=no-as-needed judges every core as if linked with -Wl,--no-as-needed.
matrix: ## the compatibility matrix (plugin × core × delivery × launch method; CORE_OLD=, CORE_LINK=, PLUGIN_OLD=, PLUGIN_OLD_ARGS=)
	@scripts/matrix.sh $(if $(CORE_OLD),--core-old='$(CORE_OLD)') $(if $(CORE_LINK),--core-link='$(CORE_LINK)') \
		$(if $(PLUGIN_OLD),--plugin-old='$(PLUGIN_OLD)') \
		$(if $(PLUGIN_OLD_ARGS),--plugin-old-args='$(PLUGIN_OLD_ARGS)')

e2e: ## end-to-end tests in a kind cluster: the images first (node-image when offline), then the test
	@scripts/e2e.sh

gpu-bundle: ## the GPU tier as one tarball, $(OUT)/limitbed-gpu.tar.gz: on the GPU machine tar xf it, then ./gpu-check (docs/gpu-report.md)
	@scripts/gpu-bundle.sh $(OUT)/limitbed-gpu.tar.gz

node-image: ## build the offline kind node image (Debian packages and Go modules only; cached; step logs)
	@scripts/node-image.sh

images: ## build the device-plugin and workload images locally (no registry)
	@scripts/plugin-image.sh && scripts/workload-image.sh

clean: ## remove build outputs
	rm -rf build build-san
