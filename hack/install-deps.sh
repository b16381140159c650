#!/usr/bin/env bash
# Installs what building, generating and testing NovaEdge needs on a fresh
# Debian 12 (bookworm) machine, which has only Go, gcc and git:
#
#   1. Debian packages (apt), installed only when missing;
#   2. the pinned Go tools of tools/go.mod (controller-gen, protoc-gen-go,
#      protoc-gen-go-grpc, bpf2go, and h2spec, the HTTP/2 conformance tester
#      the slow path's tests run), built into bin/tools/.
#   3. helm (pinned in build_helm), which the Helm chart's tests in
#      deploy/helm run, built into bin/tools/.
#
# With --lint it builds only golangci-lint (tools/lint/go.mod) into bin/tools/
# and touches no Debian package; `make lint` uses that. With --bench it
# installs only the benchmark baselines and load generators (nginx-light,
# haproxy, wrk, nghttp2-client); `make bench` uses that.
#
# Idempotent and quick (well under a second) when everything is present: a
# stamp in bin/tools/ records the hash of the tool module files and the Go
# version the tools were built with. Run as root when a package is missing;
# `make test`, `make demo` and `make generate` call it. Fails loudly (non-zero,
# with a message) when anything cannot be installed.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian's bpftool and nft live in /usr/sbin, which a non-login shell may lack.
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

log() { echo "install-deps: $*"; }
die() {
	echo "install-deps: ERROR: $*" >&2
	exit 1
}

# Debian package → a file it installs, checked after installing so that a
# package that installed but did not provide what we need is caught too.
declare -A provides=(
	[clang]=/usr/bin/clang          # compiles bpf/*.c (bpf2go)
	[llvm]=/usr/bin/llvm-strip      # llvm-strip, llvm-objdump for BPF objects
	[libbpf-dev]=/usr/include/bpf/bpf_helpers.h
	[bpftool]=/usr/sbin/bpftool     # inspect pinned maps/programs in tests
	[iproute2]=/usr/sbin/ip         # netns + veth testbeds
	[protobuf-compiler]=/usr/bin/protoc
	[ethtool]=/usr/sbin/ethtool     # NIC offload settings for XDP tests
	[nftables]=/usr/sbin/nft        # nftables DNAT baseline for benchmarks
	[frr]=/usr/lib/frr/bfdd         # FRR as the router in vip/ tests (bfdd, vtysh)
)
packages=(clang llvm libbpf-dev bpftool iproute2 protobuf-compiler ethtool nftables frr)

install_packages() {
	local missing=() p status
	# One dpkg-query for all packages; unknown ones print nothing.
	declare -A installed=()
	while read -r p status; do
		[[ $status == ii ]] && installed[$p]=1
	done < <(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' "${packages[@]}" 2>/dev/null || true)
	for p in "${packages[@]}"; do
		[[ -n ${installed[$p]:-} && -e ${provides[$p]} ]] || missing+=("$p")
	done
	if ((${#missing[@]} == 0)); then
		return
	fi

	[[ $(id -u) -eq 0 ]] || die "missing Debian packages: ${missing[*]}; run as root (or: sudo $0)"
	command -v apt-get >/dev/null || die "missing Debian packages: ${missing[*]}, and apt-get is not available"

	# The tests start their own nginx, HAProxy and FRR daemons (in
	# namespaces or on 127.0.0.1); keep Debian's packages from starting
	# system services on install (nginx on port 80, FRR's zebra on the host).
	if [[ ! -e /usr/sbin/policy-rc.d ]]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod +x /usr/sbin/policy-rc.d
		trap 'rm -f /usr/sbin/policy-rc.d' EXIT
	fi
	log "installing Debian packages: ${missing[*]}"
	local aptlog
	aptlog=$(mktemp)
	export DEBIAN_FRONTEND=noninteractive
	local apt=(apt-get -q -o DPkg::Lock::Timeout=300)
	if ! "${apt[@]}" update >"$aptlog" 2>&1; then
		cat "$aptlog" >&2
		rm -f "$aptlog"
		die "apt-get update failed"
	fi
	if ! "${apt[@]}" install -y --no-install-recommends "${missing[@]}" >>"$aptlog" 2>&1; then
		tail -n 40 "$aptlog" >&2
		rm -f "$aptlog"
		die "apt-get install ${missing[*]} failed"
	fi
	rm -f "$aptlog"
	for p in "${missing[@]}"; do
		[[ -e ${provides[$p]} ]] || die "package $p installed but ${provides[$p]} is missing"
		log "  installed $p ($(dpkg-query -W -f='${Version}' "$p"))"
	done
}

# build_tools MODDIR STAMP: builds every `tool` of MODDIR/go.mod into
# bin/tools/ unless the stamp shows they are built from the same go.mod,
# go.sum and Go version.
build_tools() {
	local moddir=$1 stamp=bin/tools/.$2.stamp tools want t missing=0
	command -v go >/dev/null || die "go is not on PATH"
	want="$(cat "$moddir/go.mod" "$moddir/go.sum" | sha256sum | cut -d' ' -f1) $(go env GOVERSION)"
	# `tool` lines of go.mod, in either the one-line or the block form.
	tools=$(awk '/^tool \(/{b=1; next} b&&/^\)/{b=0} b{print $1} /^tool [^(]/{print $2}' "$moddir/go.mod")
	[[ -n $tools ]] || die "$moddir/go.mod lists no tools"
	for t in $tools; do
		[[ -x bin/tools/${t##*/} ]] || missing=1
	done
	if ((missing == 0)) && [[ -f $stamp && $(<"$stamp") == "$want" ]]; then
		return
	fi
	log "building pinned Go tools from $moddir/go.mod into bin/tools/: $(for t in $tools; do printf '%s ' "${t##*/}"; done)"
	log "  (the first build takes a few minutes; later runs reuse it)"
	mkdir -p bin/tools
	local start=$SECONDS out=$PWD/bin/tools
	(cd "$moddir" && GOWORK=off GOFLAGS=-buildvcs=false go build -o "$out/" tool) ||
		die "building the Go tools of $moddir/go.mod failed"
	echo "$want" >"$stamp"
	log "  built in $((SECONDS - start))s"
}

# Helm builds from its own module (not tools/go.mod: its dependency tree
# would pin Kubernetes versions for the other tools); the chart's tests in
# deploy/helm run bin/tools/helm. The -X flags are those of helm's own
# release build: without them `helm version` says v3.22, and `helm template`
# and `helm lint` assume Kubernetes 1.20 instead of the 1.37 of the
# client-go helm v3.22.0 is built with.
helm_version=v3.22.0
helm_ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version
	-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37
	-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37"

# build_helm builds helm $helm_version into bin/tools/ unless the binary
# there already reports that version.
build_helm() {
	local have=""
	if [[ -x bin/tools/helm ]]; then
		have=$(bin/tools/helm version --template '{{.Version}}' 2>/dev/null || true)
	fi
	[[ $have == "$helm_version" ]] && return
	log "building helm $helm_version into bin/tools/ (${have:-not built yet}; takes a few minutes)"
	mkdir -p bin/tools
	local start=$SECONDS
	GOBIN=$PWD/bin/tools GOWORK=off GOFLAGS=-buildvcs=false go install -ldflags "$helm_ldflags" "helm.sh/helm/v3/cmd/helm@$helm_version" ||
		die "building helm $helm_version failed"
	have=$(bin/tools/helm version --template '{{.Version}}' 2>/dev/null || true)
	[[ $have == "$helm_version" ]] || die "bin/tools/helm reports version '${have}', want $helm_version"
	log "  built helm in $((SECONDS - start))s"
}

case ${1:-} in
"")
	install_packages
	build_tools tools codegen
	build_helm
	;;
--lint)
	build_tools tools/lint lint
	;;
--bench)
	# The baselines `make bench` compares against, and its load generators.
	provides+=([nginx-light]=/usr/sbin/nginx [haproxy]=/usr/sbin/haproxy [wrk]=/usr/bin/wrk [nghttp2-client]=/usr/bin/h2load)
	packages=(nginx-light haproxy wrk nghttp2-client)
	install_packages
	;;
*)
	die "usage: $0 [--lint | --bench]"
	;;
esac
