#!/usr/bin/env bash
# Prints the directory holding the kube-apiserver and etcd binaries the tests
# run through envtest (use it as KUBEBUILDER_ASSETS).
#
# Upstream publishes no binaries we may fetch, so both are built from source
# through the Go module proxy, once, and cached under
# ${XDG_CACHE_HOME:-$HOME/.cache}/novaedge/envtest/<versions>/. A cold build
# takes several minutes and about 2.5 GB of memory (kube-apiserver dominates).
# Progress goes to stderr; stdout carries only the directory.
set -euo pipefail

K8S_VERSION=v1.37.1
# The staging modules (k8s.io/api, k8s.io/apiserver, ...) are tagged v0.X.Y for
# Kubernetes v1.X.Y.
STAGING_VERSION=v0.${K8S_VERSION#v1.}
ETCD_VERSION=v3.7.3

cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/novaedge/envtest"
dest="$cache_root/k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}"

log() { echo "envtest-assets: $*" >&2; }

complete() { [[ -x $dest/kube-apiserver && -x $dest/etcd ]]; }

if complete; then
	echo "$dest"
	exit 0
fi

mkdir -p "$cache_root"
# One builder at a time: a second concurrent run waits here and then finds the
# finished directory instead of building the same binaries again.
exec 9>"$cache_root/.lock"
if ! flock -n 9; then
	log "another build holds $cache_root/.lock; waiting for it"
	flock 9
fi
if complete; then
	echo "$dest"
	exit 0
fi

work=$(mktemp -d "$cache_root/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT
# Make Ctrl-C and kill run the cleanup too.
trap 'exit 130' INT
trap 'exit 143' TERM
mkdir "$work/out"

# The throwaway modules must not inherit the caller's module settings
# (GOFLAGS=-mod=..., a go.work of the project).
export GOFLAGS=-buildvcs=false GOWORK=off GO111MODULE=on CGO_ENABLED=0
build_flags=(-trimpath -ldflags=-s\ -w)

log "building etcd $ETCD_VERSION (module go.etcd.io/etcd/server/v3)"
mkdir "$work/etcd"
(
	cd "$work/etcd"
	go mod init novaedge.invalid/envtest-etcd 2>/dev/null
	cat >main.go <<'EOF'
// Command etcd is etcd's own entry point, built at a pinned version for envtest.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
	go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2
	go mod tidy >&2
	go build "${build_flags[@]}" -o "$work/out/etcd" . >&2
)

log "building kube-apiserver $K8S_VERSION (module k8s.io/kubernetes; takes minutes)"
mkdir "$work/k8s"
(
	cd "$work/k8s"
	go mod init novaedge.invalid/envtest-kube-apiserver 2>/dev/null
	gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
	if [[ ! -f $gomod ]]; then
		log "cannot find go.mod of k8s.io/kubernetes@$K8S_VERSION in the module cache"
		exit 1
	fi
	# kubernetes requires its staging modules at v0.0.0 and replaces them with
	# local directories that do not exist for a dependent module; pin each to
	# its published tag instead.
	mapfile -t staging < <(awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" { print $1 } $1 == "require" && $2 ~ /^k8s\.io\// && $3 == "v0.0.0" { print $2 }' "$gomod" | sort -u)
	if ((${#staging[@]} == 0)); then
		log "no v0.0.0 staging modules found in $gomod; the layout of kubernetes' go.mod changed"
		exit 1
	fi
	edits=(-require "k8s.io/kubernetes@$K8S_VERSION")
	for m in "${staging[@]}"; do
		edits+=(-replace "$m=$m@$STAGING_VERSION")
	done
	go mod edit "${edits[@]}"
	go get "k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION" >&2
	# Stamp the version as Kubernetes' own build does, so /version and
	# --version report v1.37.1 rather than v0.0.0-master.
	minor=${K8S_VERSION#v1.}
	minor=${minor%%.*}
	ldflags="-s -w"
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
	done
	go build -trimpath "-ldflags=$ldflags" -o "$work/out/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver >&2
)

"$work/out/etcd" --version >&2
"$work/out/kube-apiserver" --version >&2

rm -rf "$dest"
mv "$work/out" "$dest"
log "cached in $dest"
echo "$dest"
