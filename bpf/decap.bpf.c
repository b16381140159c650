/*
 * decap.bpf.c: the DSR decapsulation program, attached by backends to their
 * NIC (fastpath/decap). NovaEdge's XDP fast path forwards L4 flows to a
 * backend by encapsulating the client's packet, addressed to the VIP, in an
 * outer packet addressed to the backend; the backend holds the VIP on its
 * loopback, so once this program has removed the outer headers its own
 * stack accepts the inner packet and replies straight to the client.
 *
 * Encapsulations removed, behind Ethernet with at most one 802.1Q tag:
 *   - IPv4 or IPv6 directly in IPv4 (protocol 4 or 41) or IPv6 (next
 *     header 4 or 41, no extension headers);
 *   - GUE variant 1 (draft-ietf-intarea-gue: IP directly in UDP, no GUE
 *     header): IPv4 or IPv6 in UDP to the configured port, in IPv4 or IPv6.
 *
 * The GUE port and the allow-list of outer destinations are map-held
 * (decap_config, decap_addrs), so user space changes them without a reload.
 *
 * The kernel here needs no ipip, ip6tnl or fou driver. Checksums are left
 * to the kernel: the inner headers carry their own, which it checks as for
 * any received packet; the outer ones are gone.
 */
#include "include/uapi.h"
#include "include/net.h"
#include "include/bpf_helpers.h"
#include "decap_consts.h"
#include "decap_maps.h"
#include "decap_structs.h"

/*
 * The kernel checks this string only for GPL-only helpers, which the program
 * does not call; it states the terms the kernel-facing object is offered on.
 */
char __license[] SEC("license") = "Dual BSD/GPL";

/*
 * struct encap is what the parser learnt about an encapsulated packet: where
 * its inner packet starts and how much the outer headers leave for it.
 */
struct encap {
	/* Start of the inner packet (or of the UDP header, for GUE). */
	void *inner;
	/* Bytes the outer headers declare after inner; within the frame. */
	__u32 avail;
	/* Bytes of outer headers between the L2 header and inner. */
	__u32 outer_len;
	/* EtherType of the inner packet, network byte order. */
	__be16 inner_proto;
};

/*
 * count adds one to a counter of this CPU. It is a real subprogram rather
 * than inlined so that its argument type, enum counter, reaches the
 * object's BTF, from which bpf2go generates the Go constants; a call costs a
 * few instructions per packet.
 */
static __noinline void count(enum counter idx)
{
	__u32 key = idx;
	__u64 *n = bpf_map_lookup_elem(&decap_counters, &key);

	if (n)
		*n += 1;
}

/* gue_port returns the UDP port GUE packets are sent to, network order. */
static __always_inline __be16 gue_port(const struct config *cfg)
{
	return fp_htons(cfg->gue_port ? cfg->gue_port : DECAP_DEFAULT_GUE_PORT);
}

/*
 * local4 and local6 report whether the outer destination daddr may be
 * decapsulated for: always, unless the allow-list is on.
 */
static __always_inline int local4(const struct config *cfg, __be32 daddr)
{
	struct local_addr key = {};

	if (!cfg->local_only)
		return 1;
	key.addr[10] = 0xff;
	key.addr[11] = 0xff;
	__builtin_memcpy(&key.addr[12], &daddr, sizeof(daddr));
	return bpf_map_lookup_elem(&decap_addrs, &key) != NULL;
}

static __always_inline int local6(const struct config *cfg, const __u8 *daddr)
{
	struct local_addr key;

	if (!cfg->local_only)
		return 1;
	__builtin_memcpy(key.addr, daddr, sizeof(key.addr));
	return bpf_map_lookup_elem(&decap_addrs, &key) != NULL;
}

/*
 * open_gue moves e past the UDP header at e->inner, already known to be
 * whole and for the GUE port, and tells the inner family from the first
 * nibble of the payload (an IP version in GUE variant 1). It returns 0, or
 * -1 if the datagram is inconsistent or does not start with an IP version.
 */
static __always_inline int open_gue(struct encap *e, void *data_end)
{
	struct udphdr *udp = e->inner;
	__u8 *first = (void *)(udp + 1);
	__u32 len = fp_ntohs(udp->len);

	if (len < sizeof(*udp) || len > e->avail)
		return -1;
	if ((void *)(first + 1) > data_end)
		return -1;
	switch (*first >> 4) {
	case 4:
		e->inner_proto = fp_htons(ETH_P_IP);
		break;
	case 6:
		e->inner_proto = fp_htons(ETH_P_IPV6);
		break;
	default:
		return -1;
	}
	e->inner = first;
	e->avail = len - sizeof(*udp);
	e->outer_len += sizeof(*udp);
	return 0;
}

/*
 * inner_ok reports whether a whole IP header of family e->inner_proto starts
 * at e->inner, and the packet it begins fits in what the outer headers leave
 * for it.
 */
static __always_inline int inner_ok(const struct encap *e, void *data_end)
{
	if (e->inner_proto == fp_htons(ETH_P_IP)) {
		struct iphdr *ip = e->inner;
		__u32 len;

		if ((void *)(ip + 1) > data_end)
			return 0;
		if (ip->version != 4 || ip->ihl * 4 < sizeof(*ip))
			return 0;
		len = fp_ntohs(ip->tot_len);
		return len >= ip->ihl * 4 && len <= e->avail;
	}

	struct ipv6hdr *ip6 = e->inner;

	if ((void *)(ip6 + 1) > data_end)
		return 0;
	if (ip6->version != 6)
		return 0;
	return sizeof(*ip6) + fp_ntohs(ip6->payload_len) <= e->avail;
}

/*
 * parse_ip4 looks at the IPv4 packet at l3 and returns the counter that
 * describes it; for a decapsulation counter, e says what to remove.
 *
 * A truncated or inconsistent outer header is dropped whatever it carries:
 * the kernel would drop it too (ip_rcv checks the same), and without a
 * sound header there is no telling whether it is ours.
 */
static __always_inline enum counter parse_ip4(void *l3, void *data_end,
					      const struct config *cfg,
					      struct encap *e)
{
	struct iphdr *ip = l3;
	enum counter kind;
	__u32 hlen, tot;

	if ((void *)(ip + 1) > data_end)
		return COUNTER_MALFORMED;
	hlen = ip->ihl * 4;
	if (ip->version != 4 || hlen < sizeof(*ip))
		return COUNTER_MALFORMED;
	tot = fp_ntohs(ip->tot_len);
	if (tot < hlen || l3 + tot > data_end)
		return COUNTER_MALFORMED;
	/*
	 * Only a first fragment holds the inner header, and stripping the
	 * outer header of each piece would leave pieces of an inner packet
	 * that no one reassembles.
	 */
	if (ip->frag_off & fp_htons(IP_MF | IP_OFFMASK))
		return COUNTER_FRAGMENT;

	e->inner = l3 + hlen;
	e->avail = tot - hlen;
	e->outer_len = hlen;
	switch (ip->protocol) {
	case IPPROTO_IPIP:
		e->inner_proto = fp_htons(ETH_P_IP);
		kind = COUNTER_IP4_IN_IP4;
		break;
	case IPPROTO_IPV6:
		e->inner_proto = fp_htons(ETH_P_IPV6);
		kind = COUNTER_IP6_IN_IP4;
		break;
	case IPPROTO_UDP: {
		struct udphdr *udp = e->inner;

		if ((void *)(udp + 1) > data_end)
			return COUNTER_MALFORMED;
		if (udp->dest != gue_port(cfg))
			return COUNTER_PASSED;
		kind = COUNTER_GUE_IP4;
		break;
	}
	default:
		return COUNTER_PASSED;
	}

	if (!local4(cfg, ip->daddr))
		return COUNTER_NOT_LOCAL;
	if (kind == COUNTER_GUE_IP4 && open_gue(e, data_end) < 0)
		return COUNTER_MALFORMED;
	if (!inner_ok(e, data_end))
		return COUNTER_MALFORMED;
	return kind;
}

/*
 * parse_ip6 is parse_ip4 for IPv6. A packet with extension headers is not
 * one of ours (the fast path adds none) and is passed; so is a jumbogram,
 * whose payload length 0 is followed by a hop-by-hop header.
 */
static __always_inline enum counter parse_ip6(void *l3, void *data_end,
					      const struct config *cfg,
					      struct encap *e)
{
	struct ipv6hdr *ip6 = l3;
	enum counter kind;
	__u32 plen;

	if ((void *)(ip6 + 1) > data_end)
		return COUNTER_MALFORMED;
	if (ip6->version != 6)
		return COUNTER_MALFORMED;
	plen = fp_ntohs(ip6->payload_len);
	e->inner = ip6 + 1;
	if (e->inner + plen > data_end)
		return COUNTER_MALFORMED;
	e->avail = plen;
	e->outer_len = sizeof(*ip6);
	switch (ip6->nexthdr) {
	case IPPROTO_IPV6:
		e->inner_proto = fp_htons(ETH_P_IPV6);
		kind = COUNTER_IP6_IN_IP6;
		break;
	case IPPROTO_IPIP:
		e->inner_proto = fp_htons(ETH_P_IP);
		kind = COUNTER_IP4_IN_IP6;
		break;
	case IPPROTO_UDP: {
		struct udphdr *udp = e->inner;

		if ((void *)(udp + 1) > data_end)
			return COUNTER_MALFORMED;
		if (udp->dest != gue_port(cfg))
			return COUNTER_PASSED;
		kind = COUNTER_GUE_IP6;
		break;
	}
	default:
		return COUNTER_PASSED;
	}

	if (!local6(cfg, ip6->daddr))
		return COUNTER_NOT_LOCAL;
	if (kind == COUNTER_GUE_IP6 && open_gue(e, data_end) < 0)
		return COUNTER_MALFORMED;
	if (!inner_ok(e, data_end))
		return COUNTER_MALFORMED;
	return kind;
}

/*
 * strip removes e->outer_len bytes after the l2_len bytes of L2 header,
 * which move forward with the EtherType (the 802.1Q tag's, if tagged) set
 * to the inner family. It returns 0, or -1 if the kernel refused.
 */
static __always_inline int strip(struct xdp_md *ctx, __u32 l2_len,
				 const struct encap *e)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct vlan_hdr vlan;
	struct ethhdr eth;
	int tagged = l2_len > sizeof(eth);

	/* An inner IP header follows, so both always fit. */
	if (data + sizeof(eth) + sizeof(vlan) > data_end)
		return -1;
	__builtin_memcpy(&eth, data, sizeof(eth));
	__builtin_memcpy(&vlan, data + sizeof(eth), sizeof(vlan));
	if (tagged)
		vlan.encap_proto = e->inner_proto;
	else
		eth.h_proto = e->inner_proto;

	if (bpf_xdp_adjust_head(ctx, (int)e->outer_len))
		return -1;

	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + sizeof(eth) + sizeof(vlan) > data_end)
		return -1;
	__builtin_memcpy(data, &eth, sizeof(eth));
	if (tagged)
		__builtin_memcpy(data + sizeof(eth), &vlan, sizeof(vlan));
	return 0;
}

SEC("xdp")
int decap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u32 l2_len = sizeof(*eth);
	struct encap e = {};
	enum counter verdict;
	struct config *cfg;
	__u32 zero = 0;
	__be16 proto;

	cfg = bpf_map_lookup_elem(&decap_config, &zero);
	if (!cfg)
		return XDP_PASS; /* an array always holds its entries */

	if ((void *)(eth + 1) > data_end) {
		count(COUNTER_MALFORMED);
		return XDP_DROP;
	}
	proto = eth->h_proto;
	if (proto == fp_htons(ETH_P_8021Q)) {
		struct vlan_hdr *vlan = (void *)(eth + 1);

		if ((void *)(vlan + 1) > data_end) {
			count(COUNTER_MALFORMED);
			return XDP_DROP;
		}
		proto = vlan->encap_proto;
		l2_len += sizeof(*vlan);
	}

	if (proto == fp_htons(ETH_P_IP))
		verdict = parse_ip4(data + l2_len, data_end, cfg, &e);
	else if (proto == fp_htons(ETH_P_IPV6))
		verdict = parse_ip6(data + l2_len, data_end, cfg, &e);
	else
		verdict = COUNTER_PASSED;

	switch (verdict) {
	case COUNTER_PASSED:
	case COUNTER_NOT_LOCAL:
	case COUNTER_FRAGMENT:
		count(verdict);
		return XDP_PASS;
	case COUNTER_MALFORMED:
		count(verdict);
		return XDP_DROP;
	default:
		break;
	}

	/*
	 * Cannot fail: the parser saw a whole inner header after what is
	 * removed. Should it, the xdp:xdp_exception tracepoint shows it.
	 */
	if (strip(ctx, l2_len, &e) < 0)
		return XDP_ABORTED;
	count(verdict);
	return XDP_PASS;
}
