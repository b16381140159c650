/*
 * bench_sink.bpf.c: the receiving end of the XDP packet-rate benchmark
 * (perf/xdpbench), attached in native mode to the generator's veth. It counts
 * the frames the node sends back, split into those addressed to the expected
 * destination (the forwarded ones) and the rest, and drops them all: the
 * generator namespace's stack has nothing to do with them. A native program
 * here is also what makes the node's native XDP_TX deliver on veth.
 */
#include "include/uapi.h"
#include "include/net.h"
#include "include/bpf_helpers.h"
#include "bench_consts.h"
#include "bench_structs.h"

char __license[] SEC("license") = "Dual BSD/GPL";

/* Frames that came back, per CPU (key 0): matched or other. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sink_stats);
} sink_counts SEC(".maps");

/*
 * The destination a forwarded frame carries (network byte order), written
 * by user space through the mmapped .bss for each case: the backend for a
 * load balancer, the VIP itself for a program that only turns frames around.
 */
__be32 sink_daddr;
__be16 sink_dport;

/* forwarded reports whether the frame is IPv4 UDP/TCP to sink_daddr:sink_dport. */
static __always_inline int forwarded(void *data, void *data_end)
{
	struct ethhdr *eth = data;
	struct iphdr *ip = data + BENCH_OFF_IP;
	struct udphdr *l4 = data + BENCH_OFF_L4;

	/* UDP and TCP both carry the destination port at offset 2. */
	if ((void *)(l4 + 1) > data_end)
		return 0;
	if (eth->h_proto != fp_htons(ETH_P_IP) || (ip->version != 4 || ip->ihl != 5))
		return 0;
	if (ip->protocol != IPPROTO_UDP && ip->protocol != IPPROTO_TCP)
		return 0;
	return ip->daddr == sink_daddr && l4->dest == sink_dport;
}

SEC("xdp")
int bench_sink(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct sink_stats *st;
	__u32 zero = 0;

	st = bpf_map_lookup_elem(&sink_counts, &zero);
	if (!st)
		return XDP_DROP;
	if (forwarded(data, data_end))
		st->matched++;
	else
		st->other++;
	return XDP_DROP;
}
