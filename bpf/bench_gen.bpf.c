/*
 * bench_gen.bpf.c: the traffic generator of the XDP packet-rate benchmark
 * (perf/xdpbench). User space runs it with BPF_PROG_TEST_RUN in live-frame
 * mode (BPF_F_TEST_XDP_LIVE_FRAMES) and ingress_ifindex set to the
 * generator's veth; the kernel turns its XDP_TX into a transmission on that
 * veth, so every run sends real frames to the node under test. Kernel pktgen
 * is not needed.
 */
#include "include/uapi.h"
#include "include/net.h"
#include "include/bpf_helpers.h"
#include "bench_consts.h"
#include "bench_structs.h"
#include "bench_csum.h"

char __license[] SEC("license") = "Dual BSD/GPL";

/* Frames handed to XDP_TX, per CPU (key 0); the count is also the flow sequence. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gen_stats);
} gen_counts SEC(".maps");

/*
 * What to send, written by user space through the mmapped .bss before the
 * run. Not const: the programs must read it at run time.
 */
struct gen_config gen_cfg;

/*
 * copy_head writes flow 0's frame start over the frame. Live-frame pages are
 * initialised from the test input only when first allocated; after a round
 * trip through the node they hold its rewrites (swapped MACs, the backend's
 * address), so each frame is rebuilt in full.
 */
static __always_inline void copy_head(void *data)
{
	__u64 *dst = data;
	const __u64 *src = (const __u64 *)gen_cfg.head;

#pragma unroll
	for (int i = 0; i < BENCH_FRAME_HEAD / 8; i++)
		dst[i] = src[i];
}

/*
 * set_flow turns flow 0's 5-tuple into flow i's: source port base+i%span and
 * source address base+i/span, with the IPv4 and L4 checksums updated.
 */
static __always_inline void set_flow(void *data, __u32 i)
{
	struct iphdr *ip = data + BENCH_OFF_IP;
	__be16 *sport = data + BENCH_OFF_L4;
	__u32 span = gen_cfg.sport_span ? gen_cfg.sport_span : 1;
	__be32 old_saddr = ip->saddr;
	__be16 old_sport = *sport;
	__be32 new_saddr = fp_htonl(fp_ntohl(old_saddr) + i / span);
	__be16 new_sport = fp_htons(fp_ntohs(old_sport) + i % span);
	__u16 *check;

	ip->saddr = new_saddr;
	*sport = new_sport;
	ip->check = bench_csum_replace4(ip->check, old_saddr, new_saddr);
	if (gen_cfg.l4_proto == IPPROTO_TCP) {
		check = &((struct tcphdr *)(data + BENCH_OFF_L4))->check;
		*check = bench_csum_replace4(*check, old_saddr, new_saddr);
		*check = bench_csum_replace2(*check, old_sport, new_sport);
		return;
	}
	check = &((struct udphdr *)(data + BENCH_OFF_L4))->check;
	if (!*check)
		return;
	*check = bench_csum_replace4(*check, old_saddr, new_saddr);
	*check = bench_udp_check(bench_csum_replace2(*check, old_sport, new_sport));
}

SEC("xdp")
int bench_gen(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct gen_stats *st;
	__u32 zero = 0;

	if (data + BENCH_FRAME_HEAD > data_end)
		return XDP_ABORTED;
	st = bpf_map_lookup_elem(&gen_counts, &zero);
	if (!st)
		return XDP_ABORTED;
	copy_head(data);
	if (gen_cfg.flows > 1) {
		/* CPUs take interleaved sequence numbers, so each flow is one flow. */
		__u32 seq = (__u32)st->sent * gen_cfg.cpus + bpf_get_smp_processor_id();

		set_flow(data, seq % gen_cfg.flows);
	}
	st->sent++;
	return XDP_TX;
}
