package decap

// The decapsulation program and its maps, compiled by bpf2go (bin/tools, on
// PATH under `make generate`) into gen/bpf/decap. Only little-endian objects
// are built: every architecture NovaEdge ships for (amd64, arm64) is one.
//go:generate bpf2go -target bpfel -output-dir ../../gen/bpf/decap -go-package decapbpf -type counter -type config -type local_addr Decap ../../bpf/decap.bpf.c -- -Wall -Werror
