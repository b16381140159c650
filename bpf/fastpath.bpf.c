/*
 * fastpath.bpf.c: NovaEdge's XDP fast path. For every frame on an attached
 * interface:
 *
 *   not IP, fragment, unknown protocol    → XDP_PASS (the kernel decides)
 *   ICMP echo to a VIP address            → echo reply, XDP_TX
 *   ICMP "frag needed"/"too big" for a
 *   DSR flow                              → to the backend that owns it
 *   ICMP error to a VIP about a NAT
 *   flow's reply                          → translated, to its backend
 *   ICMP error to the node's SNAT address
 *   about a NAT flow                      → translated, to its client
 *   DSR frame too big once encapsulated   → ICMP "frag needed"/"too big"
 *                                           to the client, XDP_TX
 *   NAT frame too big for the route out   → translation undone; ICMP
 *                                           "frag needed"/"too big" to its
 *                                           sender (client: from the VIP;
 *                                           backend: from the node), XDP_TX
 *   TCP/UDP to a VIP entry marked PASS    → XDP_PASS (the slow path listens)
 *   TCP/UDP to a fast VIP                 → conntrack, else Maglev; then NAT
 *                                           or DSR towards the backend
 *   reply of a NAT backend                → reverse translation to the client
 *   anything else                         → XDP_PASS
 *
 * The program never changes tables on its own except conntrack and NAT
 * state: VIPs, backends and Maglev tables come from the agent, which builds
 * them from the snapshot, so every node holds the same tables.
 */
#include "include/uapi.h"
#include "include/bpf_helpers.h"
#include "include/net.h"
#include "fastpath_consts.h"
#include "fastpath_structs.h"
#include "fastpath_maps.h"
#include "fastpath_helpers.h"

char __license[] SEC("license") = "Dual BSD/GPL";

/* Load-time constants, set by the loader before the verifier sees them. */

/* Slots of every Maglev table (the inner map size); a prime. */
const volatile __u32 maglev_size = MAGLEV_SIZE;

/*
 * hash / maglev_size without a division (a 32-bit divide is the slowest
 * instruction of the miss path): (hash * maglev_mod_magic) >>
 * maglev_mod_shift equals it for every 32-bit hash. The loader computes
 * both from maglev_size (fastpath.modMagic); magic 0 means divide.
 */
const volatile __u64 maglev_mod_magic = 0;
const volatile __u32 maglev_mod_shift = 0;

/*
 * Benchmarks only: neither create conntrack/NAT state nor rewrite the
 * packet, so BPF_PROG_TEST_RUN with repeat measures the miss path on every
 * run (repeat reuses the rewritten buffer and the state the first run made).
 */
const volatile __u8 bench_miss_path = 0;

/*
 * Benchmarks only: when not 0, run n of BPF_PROG_TEST_RUN takes the
 * packet's flow key with n % bench_flows added to its source port and
 * (above 65535) address, and the packet is not rewritten (repeat reuses the
 * buffer). bench_flows 65536 measures the conntrack hit path over as many
 * flows as perf/xdpbench cycles through; 0xffffffff a new flow per run, with
 * its state created (conntrack insert, NAT mapping, LRU eviction once full).
 */
const volatile __u32 bench_flows = 0;

/* Benchmarks only: the run sequence bench_flows counts (one test run at a time). */
__u32 bench_flow_seq = 0;

/*
 * The program's clock, CLOCK_MONOTONIC in nanoseconds to the last timer
 * tick: jiffies * tick_ns + tick_offset_ns. bpf_jiffies64 is two inlined
 * instructions where bpf_ktime_get_coarse_ns, the same time to the same
 * tick, is a helper call that reads the timekeeper under its seqcount: the
 * switch took 2 ns off a conntrack hit and 4 ns off a miss (perf/xdpcost).
 * The kernel advances jiffies by exactly one tick of CLOCK_MONOTONIC, so
 * the offset is fixed from boot; the loader measures both with
 * novaedge_clock (fastpath.Load). Timestamps in the maps stay in
 * CLOCK_MONOTONIC nanoseconds, which user space reads as before. tick_ns 0
 * (a spec loaded without the loader's calibration) falls back to
 * bpf_ktime_get_coarse_ns.
 */
const volatile __u64 tick_ns = 0;
const volatile __u64 tick_offset_ns = 0;

static __always_inline __u64 now_ns(void)
{
	if (tick_ns)
		return bpf_jiffies64() * tick_ns + tick_offset_ns;
	return bpf_ktime_get_coarse_ns();
}

/* log2 of fp_flow_cache's slot count; the loader sets both (0: no flow cache). */
const volatile __u32 flow_cache_bits = FLOW_CACHE_BITS;

/*
 * Never read: a global of every shared enum, so that the enums reach BTF
 * (bpf2go -type generates their Go constants; bpftool prints them).
 */
struct fp_enums {
	enum fp_family family;
	enum fp_forward forward;
	enum fp_vip_flags vip_flags;
	enum fp_backend_flags backend_flags;
	enum ct_state ct_state;
	enum fp_config_flags config_flags;
	enum fp_counter counter;
};
const volatile struct fp_enums fp_enums_btf = {};

#define NSEC 1000000000ULL

/* Offsets bounded for the verifier: L2 header ≤ 18, L4 within 16 KiB. */
#define L3_OFF(p) ((p)->l3_off & 0x3f)
#define L4_OFF(p) ((p)->l4_off & 0x3fff)

static __always_inline __u64 ct_timeout(const struct node_config *cfg, __u8 proto, __u8 state)
{
	__u32 s;

	if (proto != IPPROTO_TCP)
		s = cfg->udp_timeout ? cfg->udp_timeout : 60;
	else if (state == CT_SYN)
		s = cfg->tcp_syn_timeout ? cfg->tcp_syn_timeout : 60;
	else if (state == CT_CLOSING)
		s = cfg->tcp_closing_timeout ? cfg->tcp_closing_timeout : 10;
	else
		s = cfg->tcp_timeout ? cfg->tcp_timeout : 3600;
	return (__u64)s * NSEC;
}

static __always_inline int addr_is_zero(const __u8 *a, __u8 family)
{
	const __u32 *w = (const __u32 *)a;

	if (family == FP_FAMILY_IPV4)
		return w[0] == 0;
	return (w[0] | w[1] | w[2] | w[3]) == 0;
}

/* node_addr copies the node's address of the family into out (16 bytes). */
static __always_inline int node_addr(const struct node_config *cfg, __u8 family, __u8 *out)
{
	__builtin_memset(out, 0, 16);
	if (family == FP_FAMILY_IPV4)
		__builtin_memcpy(out, cfg->node_v4, 4);
	else
		copy16(out, cfg->node_v6);
	return addr_is_zero(out, family) ? -1 : 0;
}

/*
 * Flags of the send functions: SEND_GROWN is resolve's grown; with
 * SEND_TX_UNCOUNTED, xmit leaves counting an XDP_TX to its caller (a flow
 * cache hit counts it in its slot).
 */
#define SEND_GROWN 1
#define SEND_TX_UNCOUNTED 2

/*
 * xmit sends the frame to the next hop nh: XDP_TX out of the interface it
 * came in on, or a redirect to another interface running the fast path. A
 * frame that must leave by an interface without XDP goes to the kernel as
 * it is (already rewritten, so the kernel forwards it).
 */
static __always_inline int xmit(struct xdp_md *ctx, const struct nexthop *nh, int flags)
{
	void *data, *data_end;
	struct ethhdr *eth;

	if (nh->ifindex != ctx->ingress_ifindex) {
		/*
		 * The redirect is decided now but happens after return, so the
		 * MACs are written only when the target takes XDP frames.
		 */
		if (bpf_redirect_map(&fp_tx_ports, nh->ifindex, XDP_PASS) != XDP_REDIRECT) {
			count(FP_C_PASS_EGRESS_NO_XDP);
			return XDP_PASS;
		}
	}
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > data_end)
		return XDP_ABORTED;
	__builtin_memcpy(eth->h_dest, nh->dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, nh->smac, ETH_ALEN);
	if (nh->ifindex == ctx->ingress_ifindex) {
		if (!(flags & SEND_TX_UNCOUNTED))
			count(FP_C_TX);
		return XDP_TX;
	}
	count(FP_C_REDIRECT);
	return XDP_REDIRECT;
}

/*
 * TOO_BIG is what resolve and the send functions return, instead of a
 * verdict, for a frame too big for the route when the caller answers its
 * sender (grown set: a DSR frame the encapsulation made too big, or a NAT
 * frame in either direction), with too_big. The route's MTU is left in
 * fp_scratch's bpf_fib_lookup (mtu_result).
 */
#define TOO_BIG (-2)

/*
 * What handle_l4 returns, instead of a verdict, for a frame that TOO_BIG
 * made too_big's business (called in one place, novaedge_fastpath):
 * TOO_BIG_HLEN(hlen) to answer the sender from the packet's destination
 * (a client's DSR frame grown by hlen bytes of outer headers, or a
 * client's NAT frame, hlen 0), TOO_BIG_FROM_NODE to answer a NAT backend
 * from the node's address (its reply's destination is the client's when
 * the client address is kept).
 */
#define TOO_BIG_FROM_NODE (-3)
#define TOO_BIG_HLEN(hlen) (-256 - (int)(hlen))

/*
 * resolve looks the next hop towards dst up in the kernel's FIB into nh
 * (by destination only: source-based policy routes are not consulted).
 * It returns -1 when found, or the verdict for a frame that XDP cannot
 * forward: no neighbour entry yet (the kernel resolves it), too big, or no
 * route. A frame too big for the route is dropped, unless grown says that
 * the caller answers its sender (see TOO_BIG). The lookup's argument lives
 * in per-CPU scratch space, not on the stack: inlined into every caller,
 * it would not fit the 512 bytes.
 */
static __always_inline int resolve(struct xdp_md *ctx, __u8 family, const __u8 *dst, __u32 l3_len,
			      struct nexthop *nh, int grown)
{
	__u32 zero = 0;
	struct bpf_fib_lookup *fib = bpf_map_lookup_elem(&fp_scratch, &zero);

	if (!fib)
		return XDP_PASS;
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->ifindex = ctx->ingress_ifindex;
	fib->tot_len = l3_len;
	if (family == FP_FAMILY_IPV4) {
		fib->family = AF_INET;
		__builtin_memcpy(&fib->ipv4_dst, dst, 4);
	} else {
		fib->family = AF_INET6;
		__builtin_memcpy(fib->ipv6_dst, dst, 16);
	}
	switch (bpf_fib_lookup(ctx, fib, sizeof(*fib), 0)) {
	case BPF_FIB_LKUP_RET_SUCCESS:
		break;
	case BPF_FIB_LKUP_RET_NO_NEIGH:
		count(FP_C_PASS_NO_NEIGH);
		return XDP_PASS;
	case BPF_FIB_LKUP_RET_FRAG_NEEDED:
		if (grown)
			return TOO_BIG;
		count(FP_C_DROP_FRAG_NEEDED);
		return XDP_DROP;
	case BPF_FIB_LKUP_RET_BLACKHOLE:
	case BPF_FIB_LKUP_RET_UNREACHABLE:
	case BPF_FIB_LKUP_RET_PROHIBIT:
		count(FP_C_DROP_FIB);
		return XDP_DROP;
	default:
		count(FP_C_PASS_FIB_OTHER);
		return XDP_PASS;
	}
	nh->ingress = ctx->ingress_ifindex;
	nh->ifindex = fib->ifindex;
	__builtin_memcpy(nh->smac, fib->smac, ETH_ALEN);
	__builtin_memcpy(nh->dmac, fib->dmac, ETH_ALEN);
	return -1;
}

/*
 * send forwards the frame to dst, looking its next hop up each time
 * (flags: SEND_GROWN, see resolve; SEND_TX_UNCOUNTED, see xmit).
 */
static __always_inline int send(struct xdp_md *ctx, __u8 family, const __u8 *dst, __u32 l3_len, int flags)
{
	struct nexthop nh = {};
	int rc = resolve(ctx, family, dst, l3_len, &nh, flags & SEND_GROWN);

	if (rc != -1)
		return rc;
	return xmit(ctx, &nh, flags);
}

/*
 * send_backend forwards the frame to backend bid, whose next hop is cached
 * per CPU for NEXTHOP_TTL_NS (flags: as send's).
 */
static __always_inline int send_backend(struct xdp_md *ctx, __u32 bid, __u8 family, const __u8 *dst,
					__u32 l3_len, __u64 now, int flags)
{
	struct nexthop *nh = bpf_map_lookup_elem(&fp_nexthops, &bid);
	int rc, valid;

	if (!nh)
		return send(ctx, family, dst, l3_len, flags);
	valid = nh->expires > now && nh->ingress == ctx->ingress_ifindex;
	if (valid && l3_len <= nh->mtu)
		return xmit(ctx, nh, flags);
	rc = resolve(ctx, family, dst, l3_len, nh, flags & SEND_GROWN);
	if (rc != -1) {
		nh->expires = 0;
		return rc;
	}
	/*
	 * The entry serves frames up to the largest length the FIB accepted
	 * (route MTUs, learned path MTUs and the device's included); a
	 * longer frame is looked up again.
	 */
	if (!valid) {
		nh->expires = now + NEXTHOP_TTL_NS;
		nh->mtu = l3_len;
	} else if (l3_len > nh->mtu) {
		nh->mtu = l3_len;
	}
	return xmit(ctx, nh, flags);
}

/*
 * rewrite replaces the addresses and ports of the parsed TCP/UDP packet and
 * updates the IPv4 header and L4 checksums incrementally. With keep_src (a
 * constant at each call) only the destination changes: src and sport are
 * the packet's own, and neither is read, written nor summed.
 */
static __always_inline int rewrite(struct xdp_md *ctx, struct pkt *p, const __u8 *src, const __u8 *dst,
				   __u16 sport, __u16 dport, int keep_src)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 l3 = L3_OFF(p), l4 = L4_OFF(p);
	__be16 *old_ports = data + l4;
	__u16 *check = 0;
	__u64 addr_diff = 0, port_diff;

	if ((void *)(old_ports + 2) > data_end)
		return -1;
	if (p->key.proto == IPPROTO_TCP) {
		struct tcphdr *th = data + l4;

		if ((void *)(th + 1) > data_end)
			return -1;
		check = &th->check;
	} else {
		struct udphdr *uh = data + l4;

		if ((void *)(uh + 1) > data_end)
			return -1;
		/* An IPv4 UDP checksum of zero means "none" and stays so. */
		if (uh->check || p->key.family == FP_FAMILY_IPV6)
			check = &uh->check;
	}
	if (keep_src) {
		port_diff = (__u16)~old_ports[1] + (__u64)fp_htons(dport);
	} else {
		__u32 ports = (__u32)fp_htons(sport) | (__u32)fp_htons(dport) << 16;

		port_diff = csum_diff32(old_ports, &ports, 1);
	}

	if (p->key.family == FP_FAMILY_IPV4) {
		struct iphdr *iph = data + l3;

		if ((void *)(iph + 1) > data_end)
			return -1;
		if (!keep_src) {
			addr_diff = csum_diff32(&iph->saddr, src, 1);
			__builtin_memcpy(&iph->saddr, src, 4);
		}
		addr_diff += csum_diff32(&iph->daddr, dst, 1);
		csum_apply(&iph->check, addr_diff);
		__builtin_memcpy(&iph->daddr, dst, 4);
	} else {
		struct ipv6hdr *ip6 = data + l3;

		if ((void *)(ip6 + 1) > data_end)
			return -1;
		if (!keep_src) {
			addr_diff = csum_diff32(ip6->saddr, src, 4);
			copy16(ip6->saddr, src);
		}
		addr_diff += csum_diff32(ip6->daddr, dst, 4);
		copy16(ip6->daddr, dst);
	}
	if (check) {
		csum_apply(check, addr_diff + port_diff);
		if (p->key.proto == IPPROTO_UDP && *check == 0)
			*check = 0xffff;
	}
	if (!keep_src)
		old_ports[0] = fp_htons(sport);
	old_ports[1] = fp_htons(dport);
	return 0;
}

static __always_inline __u16 ipv4_csum(struct iphdr *iph)
{
	const __u16 *w = (const __u16 *)iph;
	__u64 s = 0;

#pragma unroll
	for (int i = 0; i < 10; i++)
		s += w[i];
	return ~csum_fold(s);
}

/*
 * encap puts an outer IP (and for GUE a UDP) header in front of the IP
 * packet, addressed from the node to the backend, keeping the Ethernet
 * header and VLAN tag. Returns the outer packet's length, or -1.
 */
static __always_inline int encap(struct xdp_md *ctx, struct pkt *p, const struct backend *be,
				 const __u8 *outer_src, __u8 forward, __u16 gue_port, __u32 hash)
{
	int outer6 = be->family == FP_FAMILY_IPV6;
	int gue = forward == FP_FWD_DSR_GUE;
	__u32 iphlen = outer6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr);
	__u32 hlen = iphlen + (gue ? sizeof(struct udphdr) : 0);
	__u32 l2 = L3_OFF(p);
	__u32 inner_len = p->l3_len & 0xffff;
	__u8 inner_proto = p->key.family == FP_FAMILY_IPV4 ? IPPROTO_IPIP : IPPROTO_IPV6;
	void *data, *data_end;
	struct ethhdr *eth, *old_eth;
	__be16 *ethertype;

	if (bpf_xdp_adjust_head(ctx, -(int)hlen)) {
		count(FP_C_DROP_HEADROOM);
		return -1;
	}
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	old_eth = data + hlen;
	if ((void *)(old_eth + 1) > data_end)
		return -1;
	/* hlen ≥ 20 > an Ethernet header: old and new never overlap. */
	__builtin_memcpy(eth, old_eth, sizeof(*eth));
	ethertype = &eth->h_proto;
	if (l2 > sizeof(*eth)) {
		struct vlan_hdr *vh = data + sizeof(*eth), *old_vh = data + hlen + sizeof(*eth);

		if ((void *)(old_vh + 1) > data_end)
			return -1;
		*vh = *old_vh;
		ethertype = &vh->encap_proto;
	}
	*ethertype = fp_htons(outer6 ? ETH_P_IPV6 : ETH_P_IP);

	if (outer6) {
		struct ipv6hdr *o = data + l2;

		if ((void *)(o + 1) > data_end)
			return -1;
		o->version = 6;
		o->priority = p->tos >> 4;
		/* The flow label carries the flow hash: entropy for ECMP in the fabric. */
		o->flow_lbl[0] = ((p->tos & 0xf) << 4) | ((hash >> 16) & 0xf);
		o->flow_lbl[1] = hash >> 8;
		o->flow_lbl[2] = hash;
		o->payload_len = fp_htons(hlen - iphlen + inner_len);
		o->nexthdr = gue ? IPPROTO_UDP : inner_proto;
		o->hop_limit = OUTER_TTL;
		copy16(o->saddr, outer_src);
		copy16(o->daddr, be->addr);
	} else {
		struct iphdr *o = data + l2;

		if ((void *)(o + 1) > data_end)
			return -1;
		o->version = 4;
		o->ihl = 5;
		o->tos = p->tos;
		o->tot_len = fp_htons(hlen + inner_len);
		o->id = 0;
		o->frag_off = fp_htons(IP_DF);
		o->ttl = OUTER_TTL;
		o->protocol = gue ? IPPROTO_UDP : inner_proto;
		o->check = 0;
		__builtin_memcpy(&o->saddr, outer_src, 4);
		__builtin_memcpy(&o->daddr, be->addr, 4);
		o->check = ipv4_csum(o);
	}
	if (gue) {
		struct udphdr *uh = data + l2 + iphlen;

		if ((void *)(uh + 1) > data_end)
			return -1;
		/* Source port from the flow hash: more ECMP entropy. */
		uh->source = fp_htons(0xc000 | (hash & 0x3fff));
		uh->dest = fp_htons(gue_port ? gue_port : DEFAULT_GUE_PORT);
		uh->len = fp_htons(sizeof(*uh) + inner_len);
		/*
		 * Zero: no checksum. Allowed for IPv6 tunnels too (RFC 6935); the
		 * decapsulation program does not need it and computing it would
		 * mean reading the whole packet.
		 */
		uh->check = 0;
	}
	return hlen + inner_len;
}

/* Chunks of csum_from: bpf_csum_diff sums multiples of 4 bytes. */
#define CSUM_CHUNK 64
#define CSUM_CHUNKS (ICMP6_ERROR_MAX / CSUM_CHUNK + 1)

/*
 * csum_from adds the bytes from offset off to the end of the frame to the
 * one's-complement sum seed (at most ICMP6_ERROR_MAX + CSUM_CHUNK bytes):
 * in chunks of CSUM_CHUNK, then of 4 bytes, then the last 1-3 bytes padded
 * with zeros, as the Internet checksum pads an odd length. Every chunk has
 * a constant size, so the verifier can bound each access.
 */
static __always_inline __u32 csum_from(struct xdp_md *ctx, __u32 off, __u32 seed)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 sum = seed;
	__be32 last = 0;
	__u8 *b;

	for (int i = 0; i < CSUM_CHUNKS; i++) {
		void *c = data + (off & 0x7ff);

		if (c + CSUM_CHUNK > data_end)
			break;
		sum = bpf_csum_diff(0, 0, c, CSUM_CHUNK, sum);
		off += CSUM_CHUNK;
	}
	for (int i = 0; i < CSUM_CHUNK / 4; i++) {
		void *c = data + (off & 0x7ff);

		if (c + 4 > data_end)
			break;
		sum = bpf_csum_diff(0, 0, c, 4, sum);
		off += 4;
	}
	b = data + (off & 0x7ff);
	if ((void *)(b + 1) <= data_end) {
		((__u8 *)&last)[0] = b[0];
		if ((void *)(b + 2) <= data_end) {
			((__u8 *)&last)[1] = b[1];
			if ((void *)(b + 3) <= data_end)
				((__u8 *)&last)[2] = b[2];
		}
		sum = bpf_csum_diff(0, 0, &last, 4, sum);
	}
	return sum;
}

/* addr_is_unicast is false for addresses no ICMP error may be sent to. */
static __always_inline int addr_is_unicast(const __u8 *a, __u8 family)
{
	if (addr_is_zero(a, family))
		return 0;
	if (family == FP_FAMILY_IPV4)
		/* 0/8, loopback, multicast, class E and broadcast. */
		return a[0] != 0 && a[0] != 127 && a[0] < 224;
	return a[0] != 0xff;
}

/* sum16 is the one's-complement sum of n (at most 16) 16-bit words, each inverted if inv. */
static __always_inline __u64 sum16(const __u16 *w, int n, int inv)
{
	__u64 s = 0;

#pragma unroll
	for (int i = 0; i < 16; i++) {
		if (i >= n)
			break;
		s += (__u16)(inv ? ~w[i] : w[i]);
	}
	return s;
}

/*
 * nat_undo puts p's own addresses and ports back into the frame that
 * rewrite translated, with the checksums updated as rewrite does. Not
 * inlined, and not rewrite itself: it runs only for a frame too big for
 * its path, the program's frame has no stack left, and rewrite, reading
 * p through a pointer that might alias the packet, would keep every word
 * of the addresses in spilled registers. Here the old words are summed,
 * the new ones written, then read back from the packet and summed; the
 * barriers keep clang from deferring a sum past the writes (which would
 * keep the old words alive again), so the function needs 16 bytes of
 * stack, what the program's 496 leave.
 */
static __noinline int nat_undo(struct xdp_md *ctx, struct pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 l3 = L3_OFF(p), l4 = L4_OFF(p);
	int v4 = p->key.family == FP_FAMILY_IPV4;
	__be16 *ports = data + l4;
	__u16 *check = 0;
	__u64 diff, a;

	if ((void *)(ports + 2) > data_end)
		return -1;
	if (p->key.proto == IPPROTO_TCP) {
		struct tcphdr *th = data + l4;

		if ((void *)(th + 1) > data_end)
			return -1;
		check = &th->check;
	} else {
		struct udphdr *uh = data + l4;

		if ((void *)(uh + 1) > data_end)
			return -1;
		/* An IPv4 UDP checksum of zero means "none" and stays so. */
		if (uh->check || !v4)
			check = &uh->check;
	}
	diff = sum16(ports, 2, 1);
	barrier_var(diff);
	barrier();
	ports[0] = fp_htons(p->key.sport);
	ports[1] = fp_htons(p->key.dport);
	barrier();
	diff += sum16(ports, 2, 0);
	if (v4) {
		struct iphdr *iph = data + l3;

		if ((void *)(iph + 1) > data_end)
			return -1;
		a = sum16((__u16 *)&iph->saddr, 4, 1);
		barrier_var(a);
		barrier();
		__builtin_memcpy(&iph->saddr, p->key.src, 4);
		__builtin_memcpy(&iph->daddr, p->key.dst, 4);
		barrier();
		a += sum16((__u16 *)&iph->saddr, 4, 0);
		csum_apply(&iph->check, a);
	} else {
		struct ipv6hdr *ip6 = data + l3;

		if ((void *)(ip6 + 1) > data_end)
			return -1;
		a = sum16((__u16 *)ip6->saddr, 16, 1);
		barrier_var(a);
		barrier();
		copy16(ip6->saddr, p->key.src);
		copy16(ip6->daddr, p->key.dst);
		barrier();
		a += sum16((__u16 *)ip6->saddr, 16, 0);
	}
	if (check) {
		csum_apply(check, diff + a);
		if (p->key.proto == IPPROTO_UDP && *check == 0)
			*check = 0xffff;
	}
	return 0;
}

/*
 * too_big answers the sender of a packet that is too big for the path the
 * fast path forwards it on, as Katran does: the sender's own path MTU
 * discovery must learn the smaller MTU, or its full-sized segments would
 * be lost for good. That is a client's DSR packet that the encapsulation
 * (hlen bytes of outer headers, still in front of it) made too big, or a
 * NAT packet in either direction (hlen 0), whose translation too_big
 * undoes first so that the sender finds its own packet, and socket, in
 * the quote. The frame becomes an ICMP "fragmentation needed" (IPv4; RFC 792,
 * 1191) or ICMPv6 "packet too big" (RFC 4443) from the address from (of
 * p's family: the VIP for a client, the node for a NAT backend) to the
 * packet's source, quoting the packet as far as RFC 1812 / 4443 allow,
 * with the route's MTU less hlen as the next-hop MTU, and goes back out
 * where it came in with the MACs swapped. It is only ever called for TCP
 * and UDP (never about an ICMP error); an IPv4 packet without DF, which
 * the sender lets routers fragment and XDP cannot, a packet from an
 * address that is no unicast one and a from that is unset are dropped.
 *
 * The program calls it in one place, for every path that returns
 * TOO_BIG_HLEN or TOO_BIG_FROM_NODE: inlined at each, its locals would
 * not fit the stack, and as a function of its own its frame would not
 * either.
 */
static __always_inline int too_big(struct xdp_md *ctx, struct pkt *p, __u32 hlen, const __u8 *from)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 zero = 0;
	struct bpf_fib_lookup *fib = bpf_map_lookup_elem(&fp_scratch, &zero);
	int v4 = p->key.family == FP_FAMILY_IPV4;
	__u32 l2 = L3_OFF(p), iphlen = v4 ? sizeof(struct iphdr) : sizeof(struct ipv6hdr);
	__u32 inner_len = p->l3_len & 0xffff, quote, mtu, len;
	struct ethhdr *eth = data, saved;
	struct vlan_hdr vh = {};
	struct icmphdr *ih;
	__be32 pseudo[2];
	__u32 sum = 0;

	hlen &= 0x3f;
	if (!hlen && nat_undo(ctx, p)) {
		count(FP_C_DROP_MALFORMED);
		return XDP_DROP;
	}
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	if (!fib || fib->mtu_result <= hlen || (void *)(eth + 1) > data_end)
		goto drop;
	mtu = fib->mtu_result - hlen;
	if (!addr_is_unicast(p->key.src, p->key.family) || addr_is_zero(from, p->key.family) ||
	    (p->key.proto != IPPROTO_TCP && p->key.proto != IPPROTO_UDP))
		goto drop;
	if (v4) {
		struct iphdr *in = data + l2 + hlen;

		if ((void *)(in + 1) > data_end || !(in->frag_off & fp_htons(IP_DF)))
			goto drop;
	}
	quote = (v4 ? ICMP4_ERROR_MAX : ICMP6_ERROR_MAX) - iphlen - sizeof(*ih);
	if (quote > inner_len)
		quote = inner_len;

	/* The Ethernet header (and VLAN tag) with the MACs swapped, aside. */
	__builtin_memcpy(saved.h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(saved.h_source, eth->h_dest, ETH_ALEN);
	saved.h_proto = eth->h_proto;
	if (l2 > sizeof(*eth)) {
		struct vlan_hdr *t = data + sizeof(*eth);

		if ((void *)(t + 1) > data_end)
			goto drop;
		vh = *t;
		vh.encap_proto = fp_htons(v4 ? ETH_P_IP : ETH_P_IPV6);
	} else {
		saved.h_proto = fp_htons(v4 ? ETH_P_IP : ETH_P_IPV6);
	}

	/*
	 * Cut the frame after the quote, then move its start so that the new
	 * IP and ICMP headers end where the quote begins: the outer headers
	 * are overwritten, the quote stays where it is.
	 */
	len = l2 + hlen + quote;
	if (len < p->frame_len + hlen && bpf_xdp_adjust_tail(ctx, (int)len - (int)(p->frame_len + hlen)))
		goto drop;
	if (bpf_xdp_adjust_head(ctx, (int)hlen - (int)(iphlen + sizeof(*ih))))
		goto drop;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > data_end)
		return XDP_ABORTED;
	*eth = saved;
	if (l2 > sizeof(*eth)) {
		struct vlan_hdr *t = data + sizeof(*eth);

		if ((void *)(t + 1) > data_end)
			return XDP_ABORTED;
		*t = vh;
	}

	if (v4) {
		struct iphdr *iph = data + l2;

		ih = (void *)(iph + 1);
		if ((void *)(ih + 1) > data_end)
			return XDP_ABORTED;
		iph->version = 4;
		iph->ihl = 5;
		iph->tos = 0;
		iph->tot_len = fp_htons(sizeof(*iph) + sizeof(*ih) + quote);
		iph->id = 0;
		iph->frag_off = 0;
		iph->ttl = OUTER_TTL;
		iph->protocol = IPPROTO_ICMP;
		iph->check = 0;
		__builtin_memcpy(&iph->saddr, from, 4);
		__builtin_memcpy(&iph->daddr, p->key.src, 4);
		iph->check = ipv4_csum(iph);
		ih->type = ICMP_DEST_UNREACH;
		ih->code = ICMP_FRAG_NEEDED;
		ih->un1 = 0;
		ih->un2 = fp_htons(mtu);
	} else {
		struct ipv6hdr *ip6 = data + l2;

		ih = (void *)(ip6 + 1);
		if ((void *)(ih + 1) > data_end)
			return XDP_ABORTED;
		*(__be32 *)ip6 = fp_htonl(6 << 28);
		ip6->payload_len = fp_htons(sizeof(*ih) + quote);
		ip6->nexthdr = IPPROTO_ICMPV6;
		ip6->hop_limit = OUTER_TTL;
		copy16(ip6->saddr, from);
		copy16(ip6->daddr, p->key.src);
		ih->type = ICMPV6_PKT_TOOBIG;
		ih->code = 0;
		ih->un1 = fp_htons(mtu >> 16);
		ih->un2 = fp_htons(mtu);
		/* The pseudo-header: both addresses, the upper-layer length and next header. */
		pseudo[0] = fp_htonl(sizeof(*ih) + quote);
		pseudo[1] = fp_htonl(IPPROTO_ICMPV6);
		sum = bpf_csum_diff(0, 0, (__be32 *)ip6->saddr, 32, 0);
		sum = bpf_csum_diff(0, 0, pseudo, sizeof(pseudo), sum);
	}
	ih->checksum = 0;
	sum = csum_from(ctx, l2 + iphlen, sum);
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	ih = data + l2 + iphlen;
	if ((void *)(ih + 1) > data_end)
		return XDP_ABORTED;
	ih->checksum = ~csum_fold(sum);
	count(FP_C_ICMP_TOO_BIG_SENT);
	return XDP_TX;
drop:
	count(FP_C_DROP_FRAG_NEEDED);
	return XDP_DROP;
}

/* maglev_slot is hash % maglev_size. */
static __always_inline __u32 maglev_slot(__u32 hash)
{
	if (maglev_mod_magic) {
		__u32 q = ((__u64)hash * maglev_mod_magic) >> (maglev_mod_shift & 63);

		return hash - q * maglev_size;
	}
	return hash % maglev_size;
}

static __always_inline __u32 maglev_pick(__u32 vip_id, __u32 hash)
{
	__u32 slot = maglev_slot(hash);
	void *table = bpf_map_lookup_elem(&fp_maglev, &vip_id);
	__u32 *id;

	if (!table)
		return 0;
	id = bpf_map_lookup_elem(table, &slot);
	return id ? *id : 0;
}

/*
 * forward sends the packet of a VIP's flow to backend be the VIP's way
 * (fwd, gue_port: the VIP entry's forward and gue_port).
 */
static __always_inline int forward(struct xdp_md *ctx, struct pkt *p, __u8 fwd, __u16 gue_port, __u32 bid,
				   const struct backend *be, const struct node_config *cfg, __u16 nat_port,
				   __u32 hash, __u64 now)
{
	/* A flow cache hit counts its own tx (handle_l4). */
	int tx = p->in_flow_cache ? SEND_TX_UNCOUNTED : 0;
	__u8 src[16] ADDR;
	int len, rc;

	switch (fwd) {
	case FP_FWD_NAT_KEEP_CLIENT:
		if (be->family != p->key.family) {
			count(FP_C_DROP_FAMILY);
			return XDP_DROP;
		}
		if (bench_miss_path || bench_flows)
			return send_backend(ctx, bid, be->family, be->addr, p->l3_len, now, tx);
		/*
		 * Only the destination changes. A case of its own, not a
		 * test of fwd inside FP_FWD_NAT's: the verifier, seeing fwd
		 * reloaded, would walk the path that skips node_addr into
		 * the rewrite that reads src.
		 */
		rc = rewrite(ctx, p, be->addr, be->addr, 0, be->port, 1);
		goto nat_send;
	case FP_FWD_NAT:
		if (be->family != p->key.family) {
			count(FP_C_DROP_FAMILY);
			return XDP_DROP;
		}
		if (node_addr(cfg, be->family, src)) {
			count(FP_C_DROP_NO_NODE_ADDR);
			return XDP_DROP;
		}
		if (bench_miss_path || bench_flows)
			return send_backend(ctx, bid, be->family, be->addr, p->l3_len, now, tx);
		rc = rewrite(ctx, p, src, be->addr, nat_port, be->port, 0);
nat_send:
		if (rc) {
			count(FP_C_DROP_MALFORMED);
			return XDP_DROP;
		}
		/*
		 * Translated first and looked up after, as every other frame:
		 * only one too big for the path to the backend pays for
		 * undoing the translation, so that the client finds its own
		 * packet quoted in the answer from the VIP.
		 */
		rc = send_backend(ctx, bid, be->family, be->addr, p->l3_len, now, tx | SEND_GROWN);
		return rc == TOO_BIG ? TOO_BIG_HLEN(0) : rc;
	case FP_FWD_DSR_IPIP:
	case FP_FWD_DSR_GUE:
		if (node_addr(cfg, be->family, src)) {
			count(FP_C_DROP_NO_NODE_ADDR);
			return XDP_DROP;
		}
		if (bench_miss_path || bench_flows)
			return send_backend(ctx, bid, be->family, be->addr, p->l3_len, now, tx);
		len = encap(ctx, p, be, src, fwd, gue_port, hash);
		if (len < 0)
			return XDP_DROP;
		rc = send_backend(ctx, bid, be->family, be->addr, len, now, tx | SEND_GROWN);
		return rc == TOO_BIG ? TOO_BIG_HLEN(len - (p->l3_len & 0xffff)) : rc;
	case FP_FWD_DSR_L2:
		if (be->family != p->key.family) {
			count(FP_C_DROP_FAMILY);
			return XDP_DROP;
		}
		/* Only the MACs change: the FIB gives the backend's. */
		return send_backend(ctx, bid, be->family, be->addr, p->l3_len, now, tx);
	}
	count(FP_C_PASS_SLOW_PATH);
	return XDP_PASS;
}

/*
 * nat_alloc finds a free SNAT source port for the flow towards be and
 * records the reply mapping. Ports are tried from a hash-chosen start, a
 * bounded number of times; a mapping idle past its timeout may be taken
 * over (the LRU may not have evicted it yet). Tries are spread over the
 * range by rehashing, so the chance that all fail is about the share of the
 * range in use to the power NAT_PORT_TRIES.
 */
static __always_inline int nat_alloc(const struct node_config *cfg, struct pkt *p, const struct backend *be,
				     __u32 vip_id, __u32 hash, __u64 now, __u16 *port)
{
	__u32 lo = cfg->nat_port_min, hi = cfg->nat_port_max;
	__u64 idle = ct_timeout(cfg, p->key.proto, CT_OPEN);
	struct nat_value nv = {};
	struct flow_key rk = {};
	__u32 span;

	if (lo == 0 || hi < lo)
		return -1;
	span = hi - lo + 1;
	copy16(rk.src, be->addr);
	if (node_addr(cfg, be->family, rk.dst))
		return -2;
	rk.sport = be->port;
	rk.proto = p->key.proto;
	rk.family = be->family;
	nv.last_seen = now;
	copy16(nv.client, p->key.src);
	copy16(nv.vip, p->key.dst);
	nv.client_port = p->key.sport;
	nv.vip_port = p->key.dport;
	nv.vip_id = vip_id;

	for (int i = 0; i < NAT_PORT_TRIES; i++) {
		struct nat_value *old;
		__u64 flags = BPF_NOEXIST;

		/* Each try rehashes: linear probing would pile flows into runs. */
		rk.dport = lo + hash_mix(hash, i) % span;
		old = bpf_map_lookup_elem(&fp_nat, &rk);
		if (old) {
			if (now - old->last_seen < idle)
				continue;
			flags = BPF_EXIST;
		}
		if (bpf_map_update_elem(&fp_nat, &rk, &nv, flags) == 0) {
			*port = rk.dport;
			count(FP_C_NAT_CREATED);
			return 0;
		}
	}
	return -1;
}

/*
 * nat_touch refreshes the SNAT mapping of a live flow, so that nat_alloc
 * never hands its port to another flow. Not inlined: it runs about once a
 * second per flow, and its key would take stack space on every packet.
 */
static __noinline void nat_touch(const struct backend *be, const struct node_config *cfg, __u16 nat_port,
				 __u8 proto, __u64 now)
{
	__u32 zero = 0;
	/* The key is built in scratch space: the program's stack is full. */
	struct flow_key *rk = bpf_map_lookup_elem(&fp_scratch, &zero);
	struct nat_value *nv;

	if (!rk)
		return;
	__builtin_memset(rk, 0, sizeof(*rk));
	copy16(rk->src, be->addr);
	if (node_addr(cfg, be->family, rk->dst))
		return;
	rk->sport = be->port;
	rk->dport = nat_port;
	rk->proto = proto;
	rk->family = be->family;
	nv = bpf_map_lookup_elem(&fp_nat, rk);
	if (nv)
		nv->last_seen = now;
}

/* nat_keep_client records the reply mapping of a DNAT-only flow. */
static __always_inline void nat_keep_client(struct pkt *p, const struct backend *be, __u32 vip_id, __u64 now)
{
	struct nat_value nv = {};
	struct flow_key rk = {};

	copy16(rk.src, be->addr);
	copy16(rk.dst, p->key.src);
	rk.sport = be->port;
	rk.dport = p->key.sport;
	rk.proto = p->key.proto;
	rk.family = be->family;
	nv.last_seen = now;
	copy16(nv.client, p->key.src);
	copy16(nv.vip, p->key.dst);
	nv.client_port = p->key.sport;
	nv.vip_port = p->key.dport;
	nv.vip_id = vip_id;
	if (bpf_map_update_elem(&fp_nat, &rk, &nv, BPF_ANY) == 0)
		count(FP_C_NAT_CREATED);
}

/*
 * to_snat_port is true when k is addressed to the node's address of its
 * family and a port of the SNAT range: the shape of every SNAT reply.
 */
static __always_inline int to_snat_port(const struct node_config *cfg, const struct flow_key *k)
{
	const __u32 *d = (const __u32 *)k->dst;
	const __u32 *n6 = (const __u32 *)cfg->node_v6;

	if (k->dport < cfg->nat_port_min || k->dport > cfg->nat_port_max)
		return 0;
	if (k->family == FP_FAMILY_IPV4)
		return d[0] == *(const __u32 *)cfg->node_v4;
	return d[0] == n6[0] && d[1] == n6[1] && d[2] == n6[2] && d[3] == n6[3];
}

/*
 * nat_reply turns a backend's reply back into one from the VIP. A reply
 * too big for the path to the client is answered to the backend instead
 * (TOO_BIG_FROM_NODE: too_big), from the node's address (its next hop,
 * and with SNAT the address it sent to), quoting the reply as the backend
 * sent it.
 */
static __always_inline int nat_reply(struct xdp_md *ctx, struct pkt *p, const struct node_config *cfg)
{
	struct nat_value *nv;
	__u64 now;
	int rc;

	if (!(cfg->flags & FP_CFG_NAT)) {
		count(FP_C_PASS_NOT_VIP);
		return XDP_PASS;
	}
	/*
	 * With SNAT only, a packet that is not to a SNAT port of the node
	 * cannot be a reply: the node's other traffic is spared the lookup.
	 */
	if ((cfg->flags & FP_CFG_NAT_SNAT_ONLY) && !to_snat_port(cfg, &p->key)) {
		count(FP_C_PASS_NOT_VIP);
		return XDP_PASS;
	}
	nv = bpf_map_lookup_elem(&fp_nat, &p->key);
	if (!nv) {
		count(FP_C_PASS_NOT_VIP);
		return XDP_PASS;
	}
	count(FP_C_NAT_REPLY);
	now = now_ns();
	if (now - nv->last_seen > TOUCH_INTERVAL_NS)
		nv->last_seen = now;
	if (rewrite(ctx, p, nv->vip, nv->client, nv->vip_port, nv->client_port, 0)) {
		count(FP_C_DROP_MALFORMED);
		return XDP_DROP;
	}
	rc = send(ctx, p->key.family, nv->client, p->l3_len, SEND_GROWN);
	return rc == TOO_BIG ? TOO_BIG_FROM_NODE : rc;
}

/* ct_key4 is the key of an IPv4 flow in fp_ct4_tcp / fp_ct4_udp. */
static __always_inline void ct_key4(const struct flow_key *k, struct flow_key4 *k4)
{
	__builtin_memcpy(k4->src, k->src, 4);
	__builtin_memcpy(k4->dst, k->dst, 4);
	k4->sport = k->sport;
	k4->dport = k->dport;
}

/*
 * ct_lookup finds the tracked flow of k (TCP or UDP) in the conntrack map
 * of its family and protocol: fp_ct4_tcp or fp_ct4_udp with the short key
 * for IPv4, fp_conntrack for IPv6. Each map has a call of its own, so that
 * the verifier inlines every lookup.
 */
static __always_inline struct ct_value *ct_lookup(const struct flow_key *k)
{
	struct flow_key4 k4;

	if (k->family != FP_FAMILY_IPV4)
		return bpf_map_lookup_elem(&fp_conntrack, k);
	ct_key4(k, &k4);
	if (k->proto == IPPROTO_UDP)
		return bpf_map_lookup_elem(&fp_ct4_udp, &k4);
	return bpf_map_lookup_elem(&fp_ct4_tcp, &k4);
}

/* ct_insert tracks the flow of k as v, in the map ct_lookup reads. */
static __always_inline long ct_insert(const struct flow_key *k, const struct ct_value *v)
{
	struct flow_key4 k4;

	if (k->family != FP_FAMILY_IPV4)
		return bpf_map_update_elem(&fp_conntrack, k, v, BPF_ANY);
	ct_key4(k, &k4);
	if (k->proto == IPPROTO_UDP)
		return bpf_map_update_elem(&fp_ct4_udp, &k4, v, BPF_ANY);
	return bpf_map_update_elem(&fp_ct4_tcp, &k4, v, BPF_ANY);
}

/*
 * The flow cache (fp_flow_cache) spares most packets of an open IPv4 flow
 * the conntrack hash lookup, the costliest step of a conntrack hit (the
 * kernel hashes the key and walks a bucket, through four calls) and, with
 * many flows, its two dependent cache misses (bucket, then entry): one slot
 * of the CPU's part of an array, found by a multiplicative hash of the
 * 5-tuple, holds a copy of the entry. A plain array with a part per CPU,
 * not a per-CPU array: a slot is then one load from the map's base, not a
 * load of the slot's per-CPU pointer first, and a 64-byte slot is one cache
 * line. The cache is small (1024 slots, 64 KiB per CPU) so
 * that it stays in the CPU's cache: it serves the busiest flows, and with
 * many more flows than slots most packets pay a probe that misses (a copy
 * keeps its slot until it expires). perf/xdpcost: a hit 30 → 23-25 ns, a
 * miss about 4 ns more for the probe; perf/xdpbench (CPU ns per packet of
 * the whole pipeline): one flow about 6 ns less, 65 536 flows within the
 * noise (a cache of 65 536 slots made those 20-40 ns dearer). A copy is
 * made by a conntrack hit of an OPEN (or UDP) flow whose VIP copy is
 * current, and serves only packets without SYN, FIN or RST (FIN and RST
 * change the TCP state; such a packet drops the copy), while the VIP epoch
 * is the same, its backend is active,
 * and until the conntrack entry's next refresh (last_seen +
 * TOUCH_INTERVAL_NS, below every timeout): the next packet after that goes
 * to conntrack, refreshes it and copies it again. The agent drops the copy
 * of an entry it writes (fastpath.Objects.PutConntrack). A flow evicted
 * from a full conntrack table is still forwarded from a copy for up to a
 * second.
 */

/* flow_cache_slot is the slot of an IPv4 5-tuple; fastpath.flowCacheSlot computes the same. */
static __always_inline __u32 flow_cache_slot(const struct flow_key *k)
{
	__u32 x = *(const __u32 *)k->src * 0x9e3779b1U ^ *(const __u32 *)k->dst;

	x ^= (((__u32)k->sport << 16) | k->dport) * 0x85ebca6bU;
	x = (x ^ k->proto) * 0xc2b2ae35U;
	return x >> ((32 - flow_cache_bits) & 31);
}

/* flow_cache_index is the index in fp_flow_cache of k's slot in this CPU's part. */
static __always_inline __u32 flow_cache_index(const struct flow_key *k)
{
	return (bpf_get_smp_processor_id() << flow_cache_bits) | flow_cache_slot(k);
}

/* flow_cache_holds is true when slot fe holds a copy of k's flow (valid or not). */
static __always_inline int flow_cache_holds(const struct flow_cache_entry *fe, const struct flow_key *k)
{
	return fe->key.sport == k->sport && fe->key.dport == k->dport && fe->proto == k->proto &&
	       *(const __u32 *)fe->key.src == *(const __u32 *)k->src &&
	       *(const __u32 *)fe->key.dst == *(const __u32 *)k->dst;
}

/* flow_cache_get returns the slot of k's flow if it holds k's copy. */
static __always_inline struct flow_cache_entry *flow_cache_get(const struct flow_key *k)
{
	__u32 slot = flow_cache_index(k);
	struct flow_cache_entry *fe = bpf_map_lookup_elem(&fp_flow_cache, &slot);

	return fe && flow_cache_holds(fe, k) ? fe : 0;
}

/*
 * flow_cache_flush adds the packets a flow cache slot counted to the
 * counters, before the slot is written again. The slot is emptied first:
 * readers read the counters before the slots, so a packet may be missed
 * by one reading (and found by the next) but is never counted twice.
 */
static __noinline void flow_cache_flush(struct flow_cache_entry *fe)
{
	__u64 packets = fe->packets, bytes = fe->bytes;

	fe->packets = 0;
	fe->bytes = 0;
	count_n(FP_C_RX, packets);
	count_n(FP_C_CT_HIT, packets);
	count_n(FP_C_TX, packets);
	count_traffic_n(&fp_vip_stats, fe->vip_id, packets, bytes);
	count_traffic_n(&fp_backend_stats, fe->backend_id, packets, bytes);
}

static __always_inline struct vip_info *vip_lookup(const struct flow_key *k)
{
	struct vip_key vk = {};
	struct vip_info *vip;

	copy16(vk.addr, k->dst);
	vk.port = k->dport;
	vk.proto = k->proto;
	vk.family = k->family;
	vip = bpf_map_lookup_elem(&fp_vips, &vk);
	if (vip)
		return vip;
	vk.port = 0;
	return bpf_map_lookup_elem(&fp_vips, &vk);
}

/*
 * ct_create tracks a new flow to backend bid, allocating its SNAT port (NAT)
 * or recording its reply mapping (NAT keeping the client address). It
 * returns the SNAT port (0 without SNAT), -1 when no port is free, or -2
 * when the node has no address of the backend's family to SNAT to.
 */
static __always_inline int ct_create(struct pkt *p, const struct vip_info *vip, const struct backend *be, __u32 bid,
				__u32 hash, __u32 epoch)
{
	__u64 now = now_ns();
	struct ct_value nct = {};
	struct node_config *cfg;
	__u16 nat_port = 0;
	__u32 zero = 0;

	cfg = bpf_map_lookup_elem(&fp_config, &zero);
	if (!cfg)
		return -1;
	if (vip->forward == FP_FWD_NAT) {
		int rc = nat_alloc(cfg, p, be, vip->id, hash, now, &nat_port);

		if (rc)
			return rc;
	} else if (vip->forward == FP_FWD_NAT_KEEP_CLIENT) {
		nat_keep_client(p, be, vip->id, now);
	}
	nct.last_seen = now;
	nct.backend_id = bid;
	nct.vip_id = vip->id;
	nct.nat_port = nat_port;
	nct.hash = hash;
	nct.forward = vip->forward;
	nct.gue_port = vip->gue_port;
	nct.vip_epoch = epoch;
	nct.state = CT_OPEN;
	/* A mid-flow packet (ECMP moved the flow here) is OPEN at once. */
	if (p->key.proto == IPPROTO_TCP && (p->tcp_flags & TCP_SYN) && !(p->tcp_flags & TCP_ACK))
		nct.state = CT_SYN;
	if (ct_insert(&p->key, &nct) == 0)
		count(FP_C_CT_CREATED);
	return nat_port;
}

/*
 * handle_l4 forwards a TCP/UDP packet to a VIP. A packet of a tracked flow
 * whose copy of its VIP entry is current (the epochs match) takes the VIP
 * entry from conntrack; any other looks it up in fp_vips, as does every
 * packet when the agent keeps no epoch.
 */
static __always_inline int handle_l4(struct xdp_md *ctx, struct pkt *p, const struct node_config *cfg)
{
	__u64 frame_len = p->frame_len;
	/* Read before the VIP lookup: a copy made from it is then never newer than its epoch. */
	__u32 epoch = cfg->vip_epoch;
	struct vip_info *vip = 0;
	struct flow_cache_entry *fe = 0;
	struct backend *be = 0;
	struct ct_value *ct;
	__u16 nat_port = 0;
	__u32 bid = 0, hash = 0, vip_id;
	__u16 gue_port;
	__u64 now;
	__u8 fwd;
	int rc;

	/*
	 * The flow cache comes before the VIP prefilter: a copy is made only
	 * of a VIP's flow and serves only while the VIP epoch it was made in
	 * is current, so a hit needs no prefilter (whose hashes were a fifth
	 * of a hit's cost); other traffic pays the probe, about 4 ns.
	 * A SYN never finds a copy worth the probe: it starts or restarts a flow.
	 */
	if (flow_cache_bits && p->key.family == FP_FAMILY_IPV4 && epoch && !(p->tcp_flags & TCP_SYN)) {
		fe = flow_cache_get(&p->key);
		if (fe && (p->tcp_flags & (TCP_FIN | TCP_RST))) {
			/* It changes the TCP state: conntrack's business. */
			fe->valid_until = 0;
		} else if (fe && fe->vip_epoch == epoch) {
			now = now_ns();
			bid = fe->backend_id;
			be = bpf_map_lookup_elem(&fp_backends, &bid);
			if (now < fe->valid_until && be && (be->flags & FP_BACKEND_ACTIVE)) {
				fwd = fe->forward;
				gue_port = fe->gue_port;
				nat_port = fe->nat_port;
				hash = fe->hash;
				p->in_flow_cache = 1;
				goto send;
			}
		}
		fe = 0;
	}
	if (!maybe_vip(cfg, &p->key))
		return nat_reply(ctx, p, cfg);
	ct = ct_lookup(&p->key);
	if (ct && epoch && ct->vip_epoch == epoch) {
		vip_id = ct->vip_id;
		fwd = ct->forward;
		gue_port = ct->gue_port;
	} else {
		vip = vip_lookup(&p->key);
		if (!vip)
			return nat_reply(ctx, p, cfg);
		if (vip->forward == FP_FWD_PASS) {
			count(FP_C_PASS_SLOW_PATH);
			return XDP_PASS;
		}
		vip_id = vip->id;
		fwd = vip->forward;
		gue_port = vip->gue_port;
	}
	count_traffic(&fp_vip_stats, vip_id, frame_len);
	now = now_ns();

	if (ct) {
		if (now - ct->last_seen > ct_timeout(cfg, p->key.proto, ct->state)) {
			count(FP_C_CT_EXPIRED);
			ct = 0;
		} else if (ct->vip_id != vip_id) {
			/* The VIP was redefined under the same address. */
			ct = 0;
		} else {
			bid = ct->backend_id;
			be = bpf_map_lookup_elem(&fp_backends, &bid);
			/* A removed backend's flows are balanced anew. */
			if (!be || !(be->flags & FP_BACKEND_ACTIVE))
				ct = 0;
		}
	}
	if (ct) {
		__u64 seen = ct->last_seen;

		count(FP_C_CT_HIT);
		nat_port = ct->nat_port;
		hash = ct->hash;
		if (vip && epoch) {
			/* Looked up: keep the copy for the flow's next packets. */
			ct->forward = vip->forward;
			ct->gue_port = vip->gue_port;
			ct->vip_epoch = epoch;
		}
		if (p->key.proto == IPPROTO_TCP) {
			__u8 f = p->tcp_flags;

			if ((f & (TCP_FIN | TCP_RST)) && ct->state != CT_CLOSING) {
				ct->state = CT_CLOSING;
				ct->last_seen = now;
			} else if ((f & TCP_SYN) && !(f & TCP_ACK) && ct->state == CT_CLOSING) {
				/* The client reuses the port: a new connection. */
				ct->state = CT_SYN;
				ct->last_seen = now;
			} else if (ct->state == CT_SYN && (f & TCP_ACK) && !(f & TCP_SYN)) {
				ct->state = CT_OPEN;
				ct->last_seen = now;
			} else if (now - seen > TOUCH_INTERVAL_NS) {
				ct->last_seen = now;
			}
		} else if (now - seen > TOUCH_INTERVAL_NS) {
			ct->last_seen = now;
		}
		/*
		 * The SNAT mapping lives as long as the flow, not only as long
		 * as the backend answers: a one-way flow keeps its port.
		 */
		if (nat_port && now - seen > TOUCH_INTERVAL_NS)
			nat_touch(be, cfg, nat_port, p->key.proto, now);
		if (flow_cache_bits && p->key.family == FP_FAMILY_IPV4 && epoch && ct->vip_epoch == epoch &&
		    !(p->tcp_flags & (TCP_SYN | TCP_FIN | TCP_RST)) && ct->state == CT_OPEN) {
			/*
			 * Copied for the flow's next packets, unless the slot
			 * holds another flow's copy still valid: with more flows
			 * than slots, flows taking each other's slots would make
			 * every packet pay a conntrack lookup and a copy.
			 */
			__u32 slot = flow_cache_index(&p->key);
			struct flow_cache_entry *copy = bpf_map_lookup_elem(&fp_flow_cache, &slot);

			if (copy && (copy->valid_until <= now || flow_cache_holds(copy, &p->key))) {
				if (copy->packets)
					flow_cache_flush(copy);
				ct_key4(&p->key, &copy->key);
				copy->proto = p->key.proto;
				copy->forward = ct->forward;
				copy->nat_port = nat_port;
				copy->backend_id = bid;
				copy->vip_id = vip_id;
				copy->hash = hash;
				copy->vip_epoch = epoch;
				copy->valid_until = ct->last_seen + TOUCH_INTERVAL_NS;
				copy->gue_port = ct->gue_port;
			}
		}
	} else {
		count(FP_C_CT_MISS);
		if (!vip) {
			/*
			 * The copy in an expired or stale entry was current, so
			 * the lookup finds the same entry (unless the agent is
			 * changing it right now).
			 */
			vip = vip_lookup(&p->key);
			if (!vip)
				return nat_reply(ctx, p, cfg);
			if (vip->forward == FP_FWD_PASS) {
				count(FP_C_PASS_SLOW_PATH);
				return XDP_PASS;
			}
			fwd = vip->forward;
			gue_port = vip->gue_port;
		}
		hash = pick_hash(vip, &p->key);
		bid = maglev_pick(vip->id, hash);
		be = bid ? bpf_map_lookup_elem(&fp_backends, &bid) : 0;
		if (!be || !(be->flags & FP_BACKEND_ACTIVE)) {
			count(FP_C_DROP_NO_BACKEND);
			return XDP_DROP;
		}
		if (p->key.proto == IPPROTO_TCP && (p->tcp_flags & TCP_RST)) {
			/*
			 * A RST without state starts nothing. It is forwarded,
			 * except with SNAT: without a mapping it has no source
			 * port to leave with, and no connection to reset.
			 */
			if (vip->forward == FP_FWD_NAT) {
				count(FP_C_DROP_RST_NO_STATE);
				return XDP_DROP;
			}
		} else if (!bench_miss_path) {
			int port = ct_create(p, vip, be, bid, hash, epoch);

			if (port == -2) {
				count(FP_C_DROP_NO_NODE_ADDR);
				return XDP_DROP;
			}
			if (port < 0) {
				count(FP_C_DROP_NAT_EXHAUSTED);
				return XDP_DROP;
			}
			nat_port = port;
		}
	}
	count_traffic(&fp_backend_stats, bid, frame_len);
send:
	rc = forward(ctx, p, fwd, gue_port, bid, be, cfg, nat_port, hash, now);
	if (fe) {
		/*
		 * A flow cache hit. Sent with XDP_TX (uncounted: see
		 * forward), its rx, ct_hit, tx and traffic counts wait in the
		 * slot; any other way, they are counted here and now.
		 */
		if (rc == XDP_TX) {
			fe->packets++;
			fe->bytes += frame_len;
		} else {
			p->in_flow_cache = 0;
			count(FP_C_CT_HIT);
			count_traffic(&fp_vip_stats, fe->vip_id, frame_len);
			count_traffic(&fp_backend_stats, bid, frame_len);
		}
	}
	return rc;
}

/* echo_reply turns an ICMP / ICMPv6 echo request into its reply in place. */
static __always_inline int echo_reply(struct xdp_md *ctx, struct pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct icmphdr *ih = data + L4_OFF(p);
	__u8 mac[ETH_ALEN];
	__u16 old, *w;

	if ((void *)(eth + 1) > data_end || (void *)(ih + 1) > data_end)
		return XDP_PASS;
	__builtin_memcpy(mac, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, mac, ETH_ALEN);

	if (p->key.family == FP_FAMILY_IPV4) {
		struct iphdr *iph = data + L3_OFF(p);
		__be32 a;

		if ((void *)(iph + 1) > data_end)
			return XDP_PASS;
		a = iph->saddr;
		iph->saddr = iph->daddr;
		iph->daddr = a;
		w = (__u16 *)&iph->ttl;
		old = *w;
		iph->ttl = OUTER_TTL;
		csum_apply(&iph->check, (__u16)~old + (__u64)*w);
		w = (__u16 *)ih;
		old = *w;
		ih->type = ICMP_ECHOREPLY;
	} else {
		struct ipv6hdr *ip6 = data + L3_OFF(p);
		__u8 a[16];

		if ((void *)(ip6 + 1) > data_end)
			return XDP_PASS;
		/* Swapping the addresses leaves the pseudo-header sum as it was. */
		copy16(a, ip6->saddr);
		copy16(ip6->saddr, ip6->daddr);
		copy16(ip6->daddr, a);
		ip6->hop_limit = OUTER_TTL;
		w = (__u16 *)ih;
		old = *w;
		ih->type = ICMPV6_ECHO_REPLY;
	}
	csum_apply(&ih->checksum, (__u16)~old + (__u64)*w);
	count(FP_C_ICMP_ECHO);
	return XDP_TX;
}

/* ICMP error types the fast path translates for NAT flows (besides ICMP_DEST_UNREACH). */
#ifndef ICMP_TIME_EXCEEDED
#define ICMP_TIME_EXCEEDED 11
#endif
#ifndef ICMP_PARAMETERPROB
#define ICMP_PARAMETERPROB 12
#endif
#ifndef ICMPV6_PARAMPROB
#define ICMPV6_PARAMPROB 4
#endif

/*
 * icmp_is_error is true for the ICMP errors that quote a packet: IPv4
 * destination unreachable, time exceeded and parameter problem; ICMPv6
 * destination unreachable, packet too big, time exceeded and parameter
 * problem (types 1-4).
 */
static __always_inline int icmp_is_error(const struct pkt *p)
{
	if (p->key.family == FP_FAMILY_IPV4)
		return p->icmp_type == ICMP_DEST_UNREACH || p->icmp_type == ICMP_TIME_EXCEEDED ||
		       p->icmp_type == ICMP_PARAMETERPROB;
	return p->icmp_type >= 1 && p->icmp_type <= ICMPV6_PARAMPROB;
}

/*
 * put_words writes the n (2 or 8) 16-bit words at src over those at dst in
 * the packet and returns the one's-complement difference (~old + new) for
 * the checksums covering them. The old words are summed before the write
 * and the new ones read back after it (the barriers keep clang from
 * holding every word in a register, or on the stack, across the write:
 * src may be a map value, which clang cannot prove apart from the packet).
 */
static __always_inline __u64 put_words(__u16 *dst, const __u16 *src, int n)
{
	__u64 d = sum16(dst, n, 1);

	barrier_var(d);
	barrier();
#pragma unroll
	for (int i = 0; i < 8; i++) {
		if (i >= n)
			break;
		dst[i] = src[i];
	}
	barrier();
	return d + sum16(dst, n, 0);
}

/*
 * icmp_nat_rewrite translates the ICMP error p about a NAT flow: the outer
 * destination becomes odst, the quoted packet's source qsrc:qsport and its
 * destination qdst:qdport (ports host order, addresses of p's family).
 * Every checksum follows incrementally: the outer IPv4 header's, the
 * quoted IPv4 header's, the quoted TCP/UDP checksum when the quote holds
 * it (an IPv4 UDP checksum of 0 stays 0) and the ICMP checksum, which
 * covers the quote (and for ICMPv6 the outer addresses). The quote must
 * hold the whole quoted IP header and both ports. Returns 0, or -1 for a
 * quote too short to translate.
 */
static __always_inline int icmp_nat_rewrite(struct xdp_md *ctx, const struct pkt *p, const __u8 *odst,
					    const __u8 *qsrc, __u16 qsport, const __u8 *qdst, __u16 qdport)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	void *end = data + L3_OFF(p) + (p->l3_len & 0xffff);
	__u32 inner = L4_OFF(p) + sizeof(struct icmphdr);
	struct icmphdr *ih = data + L4_OFF(p);
	int v4 = p->key.family == FP_FAMILY_IPV4;
	__u64 daddr, dports, dl4 = 0, dip = 0, douter;
	__u16 *l4c = 0, old;
	__be16 *ports, np;
	__u8 proto;

	if ((void *)(ih + 1) > data_end)
		return -1;
	if (v4) {
		struct iphdr *q = data + inner;

		if ((void *)(q + 1) > data_end || q->ihl < 5)
			return -1;
		ports = data + inner + (q->ihl & 0xf) * 4;
		proto = q->protocol;
	} else {
		struct ipv6hdr *q = data + inner;

		if ((void *)(q + 1) > data_end)
			return -1;
		ports = data + inner + sizeof(*q);
		proto = q->nexthdr;
	}
	if ((void *)(ports + 2) > data_end || (void *)(ports + 2) > end)
		return -1;
	if (proto == IPPROTO_TCP) {
		__u16 *c = (void *)ports + 16;

		if ((void *)(c + 1) <= data_end && (void *)(c + 1) <= end)
			l4c = c;
	} else {
		__u16 *c = (void *)ports + 6;

		if ((void *)(c + 1) <= data_end && (void *)(c + 1) <= end && (*c || !v4))
			l4c = c;
	}

	/* The quoted ports. */
	np = fp_htons(qsport);
	dports = (__u16)~ports[0] + (__u64)np;
	ports[0] = np;
	np = fp_htons(qdport);
	dports += (__u16)~ports[1] + (__u64)np;
	ports[1] = np;

	/* The quoted addresses, its IPv4 header checksum and the outer destination. */
	if (v4) {
		struct iphdr *q = data + inner, *o = data + L3_OFF(p);

		if ((void *)(q + 1) > data_end || (void *)(o + 1) > data_end)
			return -1;
		daddr = put_words((__u16 *)&q->saddr, (const __u16 *)qsrc, 2);
		daddr += put_words((__u16 *)&q->daddr, (const __u16 *)qdst, 2);
		old = q->check;
		csum_apply(&q->check, daddr);
		dip = (__u16)~old + (__u64)q->check;
		douter = put_words((__u16 *)&o->daddr, (const __u16 *)odst, 2);
		csum_apply(&o->check, douter);
		/* ICMPv4's checksum has no pseudo-header. */
		douter = 0;
	} else {
		struct ipv6hdr *q = data + inner, *o = data + L3_OFF(p);

		if ((void *)(q + 1) > data_end || (void *)(o + 1) > data_end)
			return -1;
		daddr = put_words((__u16 *)q->saddr, (const __u16 *)qsrc, 8);
		daddr += put_words((__u16 *)q->daddr, (const __u16 *)qdst, 8);
		douter = put_words((__u16 *)o->daddr, (const __u16 *)odst, 8);
	}
	if (l4c) {
		old = *l4c;
		csum_apply(l4c, daddr + dports);
		if (proto == IPPROTO_UDP && *l4c == 0)
			*l4c = 0xffff;
		dl4 = (__u16)~old + (__u64)*l4c;
	}
	csum_apply(&ih->checksum, daddr + dports + dl4 + dip + douter);
	return 0;
}

/*
 * icmp_nat_to_backend forwards an ICMP error addressed to a NAT VIP about
 * the reply q (VIP:vport → client:cport, the quote reversed into the
 * client's flow key) to the backend that sent that reply, translated as
 * Linux conntrack translates a RELATED error: to the backend, about its
 * own packet backend:bport → node:natport (SNAT) or client:cport (client
 * kept), so that its kernel finds the socket (a router on the client's
 * path saying "fragmentation needed" lowers the backend's path MTU). An
 * error about no tracked flow, or one that cannot be translated, goes to
 * the kernel as before.
 */
static __always_inline int icmp_nat_to_backend(struct xdp_md *ctx, struct pkt *p, const struct pkt *q,
					       const struct vip_info *vip, const struct node_config *cfg)
{
	struct ct_value *ct = ct_lookup(&q->key);
	const __u8 *qdst = q->key.src;
	__u16 qdport = q->key.sport;
	struct backend *be;
	__u32 bid;

	if (!ct || ct->vip_id != vip->id)
		goto pass;
	bid = ct->backend_id;
	be = bpf_map_lookup_elem(&fp_backends, &bid);
	if (!be || be->family != p->key.family)
		goto pass;
	if (vip->forward == FP_FWD_NAT) {
		qdst = p->key.family == FP_FAMILY_IPV4 ? cfg->node_v4 : cfg->node_v6;
		qdport = ct->nat_port;
		if (addr_is_zero(qdst, p->key.family) || !qdport)
			goto pass;
	}
	if (icmp_nat_rewrite(ctx, p, be->addr, be->addr, be->port, qdst, qdport))
		goto pass;
	count(FP_C_ICMP_NAT_TO_BACKEND);
	return send_backend(ctx, bid, be->family, be->addr, p->l3_len, now_ns(), 0);
pass:
	count(FP_C_PASS_ICMP);
	return XDP_PASS;
}

/* addr_eq compares two addresses as flow keys hold them (16 bytes, IPv4 zero-padded). */
static __always_inline int addr_eq(const __u8 *a, const __u8 *b)
{
	const __u32 *x = (const __u32 *)a, *y = (const __u32 *)b;

	return ((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]) | (x[3] ^ y[3])) == 0;
}

/*
 * icmp_nat_to_client forwards an ICMP error addressed to the node's SNAT
 * address about the node's packet node:natport → backend:bport (a port
 * unreachable from the backend, a "fragmentation needed" from a router on
 * its path) to the client of that NAT flow, translated as about the
 * client's own packet client:cport → VIP:vport, from the same router.
 * An error about no mapping, or one that cannot be translated, goes to the
 * kernel as before.
 */
static __always_inline int icmp_nat_to_client(struct xdp_md *ctx, struct pkt *p, const struct node_config *cfg)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 inner = L4_OFF(p) + sizeof(struct icmphdr);
	struct nat_value *nv;
	struct flow_key rk = {};
	__be16 *ports;

	/* The mapping's key is the backend's reply: the quoted packet reversed. */
	if (p->key.family == FP_FAMILY_IPV4) {
		struct iphdr *q = data + inner;

		if ((void *)(q + 1) > data_end || q->ihl < 5)
			goto pass;
		ports = data + inner + (q->ihl & 0xf) * 4;
		rk.proto = q->protocol;
		__builtin_memcpy(rk.src, &q->daddr, 4);
		__builtin_memcpy(rk.dst, &q->saddr, 4);
	} else {
		struct ipv6hdr *q = data + inner;

		if ((void *)(q + 1) > data_end)
			goto pass;
		ports = data + inner + sizeof(*q);
		rk.proto = q->nexthdr;
		copy16(rk.src, q->daddr);
		copy16(rk.dst, q->saddr);
	}
	if (rk.proto != IPPROTO_TCP && rk.proto != IPPROTO_UDP)
		goto pass;
	if ((void *)(ports + 2) > data_end)
		goto pass;
	rk.family = p->key.family;
	rk.sport = fp_ntohs(ports[1]);
	rk.dport = fp_ntohs(ports[0]);
	/* Quoting the node's SNAT address and port, and addressed to it. */
	if (!to_snat_port(cfg, &rk) || !addr_eq(p->key.dst, rk.dst))
		goto pass;
	nv = bpf_map_lookup_elem(&fp_nat, &rk);
	if (!nv)
		goto pass;
	if (icmp_nat_rewrite(ctx, p, nv->client, nv->client, nv->client_port, nv->vip, nv->vip_port))
		goto pass;
	count(FP_C_ICMP_NAT_TO_CLIENT);
	return send(ctx, p->key.family, nv->client, p->l3_len, 0);
pass:
	count(FP_C_PASS_ICMP);
	return XDP_PASS;
}

/*
 * icmp_error forwards a "fragmentation needed" / "packet too big" (frag
 * set) about a DSR flow to the backend serving it: the backend sent the
 * too-big packet (its replies go to the client directly), so only it can
 * lower its path MTU. The quoted packet is the VIP → client direction. An
 * error of any kind about a NAT flow goes to icmp_nat_to_backend.
 */
static __always_inline int icmp_error(struct xdp_md *ctx, struct pkt *p, const struct node_config *cfg, int frag)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 inner = L4_OFF(p) + sizeof(struct icmphdr);
	struct pkt q = {};
	struct vip_info *vip;
	struct ct_value *ct;
	struct backend *be;
	__be16 *ports;
	__u32 bid, hash;
	__u8 src[16];
	int len;

	if (p->key.family == FP_FAMILY_IPV4) {
		struct iphdr *iph = data + inner;

		if ((void *)(iph + 1) > data_end || iph->ihl < 5)
			goto pass;
		ports = data + inner + iph->ihl * 4;
		q.key.proto = iph->protocol;
		__builtin_memcpy(q.key.src, &iph->daddr, 4);
		__builtin_memcpy(q.key.dst, &iph->saddr, 4);
	} else {
		struct ipv6hdr *ip6 = data + inner;

		if ((void *)(ip6 + 1) > data_end)
			goto pass;
		ports = data + inner + sizeof(*ip6);
		q.key.proto = ip6->nexthdr;
		copy16(q.key.src, ip6->daddr);
		copy16(q.key.dst, ip6->saddr);
	}
	if (q.key.proto != IPPROTO_TCP && q.key.proto != IPPROTO_UDP)
		goto pass;
	if ((void *)(ports + 2) > data_end || (void *)(ports + 2) > data + L3_OFF(p) + (p->l3_len & 0xffff))
		goto pass;
	q.key.family = p->key.family;
	q.key.sport = fp_ntohs(ports[1]);
	q.key.dport = fp_ntohs(ports[0]);

	vip = vip_lookup(&q.key);
	if (vip && (vip->forward == FP_FWD_NAT || vip->forward == FP_FWD_NAT_KEEP_CLIENT))
		return icmp_nat_to_backend(ctx, p, &q, vip, cfg);
	if (!vip || vip->forward < FP_FWD_DSR_IPIP || !frag)
		goto pass;
	ct = ct_lookup(&q.key);
	if (ct) {
		bid = ct->backend_id;
		hash = ct->hash;
	} else {
		hash = pick_hash(vip, &q.key);
		bid = maglev_pick(vip->id, hash);
	}
	be = bpf_map_lookup_elem(&fp_backends, &bid);
	if (!bid || !be || !(be->flags & FP_BACKEND_ACTIVE))
		goto pass;
	count(FP_C_ICMP_ERROR_FORWARDED);
	if (vip->forward == FP_FWD_DSR_L2) {
		if (be->family != p->key.family)
			goto pass;
		return send_backend(ctx, bid, be->family, be->addr, p->l3_len, now_ns(), 0);
	}
	if (node_addr(cfg, be->family, src)) {
		count(FP_C_DROP_NO_NODE_ADDR);
		return XDP_DROP;
	}
	len = encap(ctx, p, be, src, vip->forward, vip->gue_port, hash);
	if (len < 0)
		return XDP_DROP;
	/* Grown, but an ICMP error is never answered with another: dropped if too big. */
	return send_backend(ctx, bid, be->family, be->addr, len, now_ns(), 0);
pass:
	count(FP_C_PASS_ICMP);
	return XDP_PASS;
}

static __always_inline int handle_icmp(struct xdp_md *ctx, struct pkt *p, const struct node_config *cfg)
{
	struct vip_key vk = {};
	struct vip_info *vip;
	int v4 = p->key.family == FP_FAMILY_IPV4;

	/* ICMP is for VIP addresses only: their address entries (port 0, proto 0). */
	copy16(vk.addr, p->key.dst);
	vk.family = p->key.family;
	vip = bpf_map_lookup_elem(&fp_vips, &vk);
	if (!vip) {
		/* An error about a NAT flow's packet to a backend, to the SNAT address. */
		if ((cfg->flags & FP_CFG_NAT) && icmp_is_error(p))
			return icmp_nat_to_client(ctx, p, cfg);
		count(FP_C_PASS_ICMP);
		return XDP_PASS;
	}
	if (p->icmp_type == (v4 ? ICMP_ECHO : ICMPV6_ECHO_REQUEST) && (vip->flags & FP_VIP_ECHO))
		return echo_reply(ctx, p);
	/* DSR forwards "frag needed" / "too big" only; NAT translates every error. */
	if (icmp_is_error(p))
		return icmp_error(ctx, p, cfg,
				  v4 ? (p->icmp_type == ICMP_DEST_UNREACH && p->icmp_code == ICMP_FRAG_NEEDED)
				     : p->icmp_type == ICMPV6_PKT_TOOBIG);
	count(FP_C_PASS_ICMP);
	return XDP_PASS;
}

static __always_inline int fastpath(struct xdp_md *ctx, struct pkt *p)
{
	struct node_config *cfg;
	__u32 zero = 0;
	int rc;

	switch (parse(ctx, p)) {
	case PARSE_OK:
		break;
	case PARSE_NOT_IP:
		count(FP_C_PASS_NOT_IP);
		return XDP_PASS;
	case PARSE_FRAGMENT:
		count(FP_C_PASS_FRAGMENT);
		return XDP_PASS;
	case PARSE_OTHER_L4:
		count(FP_C_PASS_OTHER_PROTO);
		return XDP_PASS;
	default:
		/* Not ours to judge: the kernel drops what is really broken. */
		count(FP_C_PASS_MALFORMED);
		return XDP_PASS;
	}
	cfg = bpf_map_lookup_elem(&fp_config, &zero);
	if (!cfg)
		return XDP_PASS;
	if (bench_flows) {
		__u32 n = bench_flow_seq++ % bench_flows;

		p->key.sport += n;
		*(__u32 *)p->key.src += n >> 16;
	}
	if (p->key.proto == IPPROTO_ICMP || p->key.proto == IPPROTO_ICMPV6) {
		/* ICMP over the wrong IP version is nobody's. */
		if ((p->key.proto == IPPROTO_ICMP) != (p->key.family == FP_FAMILY_IPV4)) {
			count(FP_C_PASS_OTHER_PROTO);
			return XDP_PASS;
		}
		return handle_icmp(ctx, p, cfg);
	}
	rc = handle_l4(ctx, p, cfg);
	/* One compare for every other frame: handle_l4's only negative values are these. */
	if (rc < 0) {
		const __u8 *from = p->key.dst;
		__u32 hlen = 0;

		if (rc == TOO_BIG_FROM_NODE) {
			/*
			 * Looked up again rather than kept live across
			 * handle_l4 for this rare frame: kept, the
			 * not-a-VIP path measured 1 ns dearer (perf/xdpcost).
			 */
			cfg = bpf_map_lookup_elem(&fp_config, &zero);
			if (!cfg)
				return XDP_DROP;
			from = p->key.family == FP_FAMILY_IPV4 ? cfg->node_v4 : cfg->node_v6;
		} else
			hlen = TOO_BIG_HLEN(0) - rc;
		return too_big(ctx, p, hlen, from);
	}
	return rc;
}

/*
 * rx is counted once the packet is done with, unless its flow cache slot
 * counts it (struct flow_cache_entry), which saves the hit path a counter.
 */
SEC("xdp")
int novaedge_fastpath(struct xdp_md *ctx)
{
	struct pkt p = {};
	int rc = fastpath(ctx, &p);

	if (!p.in_flow_cache)
		count(FP_C_RX);
	return rc;
}

/*
 * novaedge_clock is no part of the fast path: the loader runs it with
 * BPF_PROG_TEST_RUN to learn how jiffies relate to CLOCK_MONOTONIC (see
 * tick_ns). It writes bpf_jiffies64 and then bpf_ktime_get_ns, as two
 * 64-bit words in host order, over the first 16 bytes of the frame.
 */
SEC("xdp")
int novaedge_clock(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 *out = data;

	if ((void *)(out + 2) > data_end)
		return XDP_ABORTED;
	out[0] = bpf_jiffies64();
	out[1] = bpf_ktime_get_ns();
	return XDP_PASS;
}
