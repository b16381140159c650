/*
 * bench_structs.h: types shared between the XDP benchmark's programs and
 * perf/xdpbench. bpf2go generates their Go declarations from BTF (-type), so
 * they are never mirrored by hand.
 */
#ifndef NOVAEDGE_BENCH_STRUCTS_H
#define NOVAEDGE_BENCH_STRUCTS_H

#include "include/uapi.h"
#include "include/net.h"
#include "bench_consts.h"

/*
 * struct gen_config tells the generator what to send. head is the start of
 * flow 0's frame with valid checksums; the program copies it over every
 * frame, because live-frame pages come back to the generator after the node
 * has rewritten them, then derives the frame's flow from its sequence.
 */
struct gen_config {
	/* Ethernet + IPv4 (no options) + UDP or TCP header + payload start. */
	__u8 head[BENCH_FRAME_HEAD];
	/* Distinct flows to cycle through; 0 or 1 sends one fixed 5-tuple. */
	__u32 flows;
	/* Generator CPUs, so that CPUs interleave flows instead of repeating them. */
	__u32 cpus;
	/* Source ports per source address: flow i uses port base+i%span, address base+i/span. */
	__u32 sport_span;
	/* IPPROTO_UDP or IPPROTO_TCP: where the L4 checksum sits. */
	__u32 l4_proto;
} __attribute__((aligned(8)));

/* struct gen_stats counts, per CPU, the frames the generator handed to XDP_TX. */
struct gen_stats {
	/* Frames transmitted towards the node; also the per-CPU flow sequence. */
	__u64 sent;
};

/* struct sink_stats counts, per CPU, the frames that came back from the node. */
struct sink_stats {
	/* Frames to the expected destination address and port: forwarded ones. */
	__u64 matched;
	/* Anything else (wrong destination, not IPv4 UDP/TCP); shows misrouting. */
	__u64 other;
};

#endif /* NOVAEDGE_BENCH_STRUCTS_H */
