package sockmap

// The verdict program and its maps, compiled by bpf2go (bin/tools, on PATH
// under `make generate`) into gen/bpf/sockmap. Only little-endian objects are
// built: every architecture NovaEdge ships for (amd64, arm64) is one.
//go:generate bpf2go -target bpfel -output-dir ../../../gen/bpf/sockmap -go-package sockmapbpf -type dir_stats Sockmap ../../../bpf/sockmap.bpf.c -- -Wall -Werror
