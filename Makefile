# NovaEdge: targets a newcomer can guess. `make help` lists them.
#
# Tools are pinned in their own modules and built into bin/tools/ by
# hack/install-deps.sh: tools/go.mod (controller-gen, protoc-gen-go,
# protoc-gen-go-grpc, bpf2go) and tools/lint/go.mod (golangci-lint). They can
# also be run without building, e.g. `go tool -modfile=tools/go.mod controller-gen`.
# Debian packages (clang, llvm, libbpf-dev, bpftool, protoc, ...) are
# installed by the same script when missing; it needs root only then.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

export GOFLAGS := $(strip $(GOFLAGS) -buildvcs=false)
# Byte-wise sorting and messages, so generation does not depend on the locale.
export LC_ALL := C

MODULE := github.com/novaedge/novaedge
TOOLS := $(CURDIR)/bin/tools
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

# The paths `make generate` writes; verify-generate checks exactly these.
GENERATED_PATHS := gen deploy/crds deploy/helm/novaedge/crds api

.PHONY: help deps tools build generate verify-generate test envtest fmt-check vet lint demo bench clean

help: ## list the targets
	@echo "usage: make <target>"
	@grep -E '^[a-z][a-z-]*:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

deps: ## install missing Debian packages and build the pinned Go tools into bin/tools
	@hack/install-deps.sh

build: ## build bin/novaedge-controller, bin/novaedge-agent, bin/novaedge-bfdd, bin/novaedgectl
	go build -ldflags "-X main.version=$(VERSION)" -o bin/ ./cmd/...

generate: deps ## regenerate deepcopy (api/), CRDs (deploy/crds), protobuf/gRPC (gen/) and go:generate output
	@echo "generate: controller-gen (deepcopy, CRDs)"
	@rm -f deploy/crds/novaedge.io_*.yaml
	$(TOOLS)/controller-gen object:headerFile=hack/boilerplate.go.txt paths=./api/...
	$(TOOLS)/controller-gen crd:allowDangerousTypes=false paths=./api/... output:crd:artifacts:config=deploy/crds
	rm -f deploy/helm/novaedge/crds/*.yaml && cp deploy/crds/novaedge.io_*.yaml deploy/helm/novaedge/crds/
	@echo "generate: protoc ($$(protoc --version))"
	@find gen -name '*.pb.go' -delete 2>/dev/null || true
	@protos=$$(find api/proto -name '*.proto' | sort); \
	if [[ -n $$protos ]]; then \
		echo "protoc -I api/proto --go_out=. --go-grpc_out=. (module $(MODULE)) $$(echo $$protos)"; \
		protoc -I api/proto \
			--plugin=protoc-gen-go=$(TOOLS)/protoc-gen-go \
			--plugin=protoc-gen-go-grpc=$(TOOLS)/protoc-gen-go-grpc \
			--go_out=. --go_opt=module=$(MODULE) \
			--go-grpc_out=. --go-grpc_opt=module=$(MODULE) \
			$$protos; \
	fi
	@echo "generate: go generate (bin/tools on PATH, e.g. //go:generate bpf2go ...)"
	PATH="$(TOOLS):$$PATH" go generate ./...

verify-generate: ## fail if `make generate` changes gen/, deploy/crds/ or api/
	@hack/verify-generate.sh $(GENERATED_PATHS)

vet: ## go vet ./...
	go vet ./...

fmt-check: ## fail listing Go files that gofmt would change
	@unformatted=$$(git ls-files --cached --others --exclude-standard -z -- '*.go' | xargs -0 -r gofmt -l); \
	if [[ -n $$unformatted ]]; then \
		echo "gofmt: these files need formatting (run gofmt -w):" >&2; \
		echo "$$unformatted" >&2; \
		exit 1; \
	fi

test: ## install deps, vet, gofmt check, verify generated code, then go test -race (run as root)
	@hack/install-deps.sh
	$(MAKE) --no-print-directory vet
	$(MAKE) --no-print-directory fmt-check
	$(MAKE) --no-print-directory verify-generate
	@# A separate assignment, so that a failed build of the envtest binaries stops here.
	assets="$$(hack/envtest-assets.sh)"; KUBEBUILDER_ASSETS="$$assets" go test -race -count=1 -timeout 20m ./...

envtest: ## build/cache the kube-apiserver and etcd used by the tests (hack/envtest-assets.sh)
	@hack/envtest-assets.sh

lint: ## golangci-lint (pinned in tools/lint/go.mod) with .golangci.yml; not part of test
	@hack/install-deps.sh --lint
	$(TOOLS)/golangci-lint run --config .golangci.yml ./...

demo: ## install deps, build, then run hack/demo.sh
	@hack/install-deps.sh
	$(MAKE) --no-print-directory build
	hack/demo.sh

bench: ## run the benchmarks (hack/bench.sh); results go under perf/results/
	@if [[ -x hack/bench.sh ]]; then \
		hack/bench.sh; \
	else \
		echo "bench: no benchmarks yet; they arrive with the fast-path and slow-path issues (hack/bench.sh)"; \
	fi

clean: ## remove build output (bin/, including the built tools) and coverage files
	rm -rf bin
	rm -f coverage.out coverage.html cover.out *.coverprofile
