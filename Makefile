# NovaEdge — targets a newcomer can guess. `make help` lists them.
SHELL := /bin/bash
export GOFLAGS := -buildvcs=false
TOOL := go tool -modfile=tools/go.mod
VERSION ?= dev

.PHONY: help build generate verify-generate test lint demo bench clean deps

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

deps: ## install missing apt packages (clang, llvm, libbpf-dev, bpftool, protoc, ...)
	@hack/install-deps.sh

build: ## build bin/novaedge-controller, bin/novaedge-agent, bin/novaedgectl
	go build -ldflags "-X main.version=$(VERSION)" -o bin/ ./cmd/...

generate: deps ## regenerate deepcopy, CRDs (deploy/crds) and protobuf code (gen/)
	$(TOOL) controller-gen object:headerFile=hack/boilerplate.go.txt paths=./api/...
	$(TOOL) controller-gen crd paths=./api/... output:crd:artifacts:config=deploy/crds
	@mkdir -p bin/tools
	go build -modfile=tools/go.mod -o bin/tools/ google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc
	protoc -I api/proto \
		--plugin=protoc-gen-go=bin/tools/protoc-gen-go --plugin=protoc-gen-go-grpc=bin/tools/protoc-gen-go-grpc \
		--go_out=. --go_opt=module=github.com/novaedge/novaedge \
		--go-grpc_out=. --go-grpc_opt=module=github.com/novaedge/novaedge \
		$$(find api/proto -name '*.proto' | sort)
	go generate ./...

verify-generate: ## fail if `make generate` would change committed files
	@hack/verify-generate.sh

test: deps ## install deps, vet, check formatting and generated code, run all tests (as root)
	go vet ./...
	@unformatted=$$(gofmt -l $$(git ls-files '*.go') 2>/dev/null); \
		if [[ -n $$unformatted ]]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	@hack/verify-generate.sh
	go test -race -count=1 -timeout 20m ./...

lint: ## go vet and gofmt (golangci-lint arrives with the tooling follow-up)
	go vet ./...
	gofmt -l .

demo: deps build ## run the standalone agent on the embedded default and show it answering
	@hack/demo.sh

bench: ## benchmarks (perf/); arrive with the fast-path and slow-path issues
	@if [[ -x hack/bench.sh ]]; then hack/bench.sh; else echo "bench: no benchmarks yet (they arrive with the data-path issues)"; fi

clean: ## remove build output
	rm -rf bin
