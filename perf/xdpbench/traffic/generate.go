package traffic

// The benchmark's BPF programs, compiled by bpf2go (bin/tools, on PATH under
// `make generate`) into gen/bpf/bench: the live-frame generator, the sink and
// the reference node programs. Only little-endian objects are built, like
// every NovaEdge BPF object.
//go:generate bpf2go -target bpfel -output-dir ../../../gen/bpf/bench -go-package benchbpf -type gen_stats -type xdp_md Benchgen ../../../bpf/bench_gen.bpf.c -- -Wall -Werror
//go:generate bpf2go -target bpfel -output-dir ../../../gen/bpf/bench -go-package benchbpf -type sink_stats Benchsink ../../../bpf/bench_sink.bpf.c -- -Wall -Werror
//go:generate bpf2go -target bpfel -output-dir ../../../gen/bpf/bench -go-package benchbpf Benchnode ../../../bpf/bench_node.bpf.c -- -Wall -Werror
