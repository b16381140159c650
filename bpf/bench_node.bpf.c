/*
 * bench_node.bpf.c: the reference programs the XDP packet-rate benchmark
 * (perf/xdpbench) attaches to the node's veth, as variants of one role (the
 * node under test), so they share one object:
 *
 *   bench_node_tx      swaps the MAC addresses and sends the frame back: the
 *                      machine's ceiling for any XDP_TX forwarder.
 *   bench_node_tx_min  the least a NAT load balancer does: parses
 *                      Ethernet/IPv4/UDP|TCP, checks VIP and port, rewrites
 *                      the destination to the backend with both checksums
 *                      updated, swaps MACs, XDP_TX.
 *   bench_node_pass    XDP_PASS, so that the kernel stack (nftables) handles
 *                      frames while native XDP_TX from the generator still
 *                      delivers to this veth.
 */
#include "include/uapi.h"
#include "include/net.h"
#include "include/bpf_helpers.h"
#include "bench_consts.h"
#include "bench_csum.h"

char __license[] SEC("license") = "Dual BSD/GPL";

/*
 * The service, in network byte order, set before loading: constants cost
 * nothing at run time, where a real load balancer looks them up in maps.
 */
volatile const __be32 node_vip;
volatile const __be16 node_port;
volatile const __be32 node_backend;

/* swap_macs exchanges source and destination MAC (6 bytes each, 2-aligned). */
static __always_inline void swap_macs(void *data)
{
	__u16 *p = data;
	__u16 a = p[0], b = p[1], c = p[2];

	p[0] = p[3];
	p[1] = p[4];
	p[2] = p[5];
	p[3] = a;
	p[4] = b;
	p[5] = c;
}

SEC("xdp")
int bench_node_tx(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;

	if (data + sizeof(struct ethhdr) > data_end)
		return XDP_PASS;
	swap_macs(data);
	return XDP_TX;
}

SEC("xdp")
int bench_node_tx_min(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + BENCH_OFF_IP;
	void *l4 = data + BENCH_OFF_L4;
	__be32 vip = node_vip, backend = node_backend;

	if ((void *)(ip + 1) > data_end)
		return XDP_PASS;
	if (eth->h_proto != fp_htons(ETH_P_IP) || (ip->version != 4 || ip->ihl != 5) || ip->daddr != vip)
		return XDP_PASS;
	if (ip->protocol == IPPROTO_TCP) {
		struct tcphdr *tcp = l4;

		if ((void *)(tcp + 1) > data_end || tcp->dest != node_port)
			return XDP_PASS;
		tcp->check = bench_csum_replace4(tcp->check, vip, backend);
	} else if (ip->protocol == IPPROTO_UDP) {
		struct udphdr *udp = l4;

		if ((void *)(udp + 1) > data_end || udp->dest != node_port)
			return XDP_PASS;
		if (udp->check)
			udp->check = bench_udp_check(bench_csum_replace4(udp->check, vip, backend));
	} else {
		return XDP_PASS;
	}
	ip->daddr = backend;
	ip->check = bench_csum_replace4(ip->check, vip, backend);
	swap_macs(data);
	return XDP_TX;
}

SEC("xdp")
int bench_node_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}
