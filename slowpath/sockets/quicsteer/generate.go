package quicsteer

// The SK_REUSEPORT program and its maps, compiled by bpf2go (bin/tools, on
// PATH under `make generate`) into gen/bpf/quicsteer. Only little-endian
// objects are built: every architecture NovaEdge ships for (amd64, arm64)
// is one.
//go:generate bpf2go -target bpfel -output-dir ../../../gen/bpf/quicsteer -go-package quicsteerbpf -type quicsteer_stat Quicsteer ../../../bpf/quicsteer.bpf.c -- -Wall -Werror
