#!/usr/bin/env bash
# Installs what building and testing NovaEdge needs on a fresh Debian machine
# (which has only Go, gcc and git). Idempotent and quick when all is present.
# Run as root; `make test`, `make demo` and `make generate` call it.
set -euo pipefail

pkgs=(clang llvm libbpf-dev bpftool iproute2 protobuf-compiler ethtool nftables)
missing=()
for p in "${pkgs[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing+=("$p")
	fi
done
if ((${#missing[@]})); then
	if [[ $(id -u) -ne 0 ]]; then
		echo "install-deps: missing packages ${missing[*]}; run as root" >&2
		exit 1
	fi
	echo "install-deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q >/dev/null
	apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
for cmd in clang protoc ip; do
	command -v "$cmd" >/dev/null || { echo "install-deps: $cmd still missing after install" >&2; exit 1; }
done
