/*
 * fastpath_helpers.h: the building blocks of the XDP fast path that do not
 * decide anything: packet parsing into a flow key, the flow hash (identical
 * to fastpath/flowhash in Go, so every node and the tests pick the same
 * Maglev slot), incremental checksum updates (RFC 1624) and counters.
 */
#ifndef NOVAEDGE_FASTPATH_HELPERS_H
#define NOVAEDGE_FASTPATH_HELPERS_H

#include "include/uapi.h"
#include "include/bpf_helpers.h"
#include "include/net.h"
#include "fastpath_consts.h"
#include "fastpath_structs.h"
#include "fastpath_maps.h"

/* struct pkt is what parsing learned about a frame. */
struct pkt {
	/* The frame's 5-tuple (ports host order; 0 for ICMP). */
	struct flow_key key;
	/*
	 * Offset of the IP header, and of the L4 header, from the frame start
	 * (below 16 KiB: 16 bits leave stack room for frame_len).
	 */
	__u16 l3_off;
	__u16 l4_off;
	/* Length of the IP packet by its own header (not counting padding). */
	__u32 l3_len;
	/* Length of the whole frame (for the byte counters). */
	__u32 frame_len;
	/* TCP flags (0 for other protocols). */
	__u8 tcp_flags;
	/* IPv4 TOS / IPv6 traffic class, copied to tunnel headers. */
	__u8 tos;
	/* ICMP type, for ICMP and ICMPv6. */
	__u8 icmp_type;
	__u8 icmp_code;
	/* Counted in its flow's flow cache slot, not as rx (see struct flow_cache_entry). */
	__u8 in_flow_cache;
};

enum parse_result {
	PARSE_OK = 0,
	PARSE_NOT_IP,
	PARSE_FRAGMENT,
	PARSE_MALFORMED,
	/* IP, but neither TCP, UDP, ICMP nor ICMPv6. */
	PARSE_OTHER_L4,
};

static __always_inline void count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&fp_counters, &idx);

	if (c)
		*c += 1;
}

static __always_inline void count_n(__u32 idx, __u64 n)
{
	__u64 *c = bpf_map_lookup_elem(&fp_counters, &idx);

	if (c)
		*c += n;
}

static __always_inline void count_traffic_n(void *map, __u32 id, __u64 packets, __u64 bytes)
{
	struct fp_traffic *t = bpf_map_lookup_elem(map, &id);

	if (t) {
		t->packets += packets;
		t->bytes += bytes;
	}
}

static __always_inline void count_traffic(void *map, __u32 id, __u64 bytes)
{
	count_traffic_n(map, id, 1, bytes);
}

static __always_inline void copy16(__u8 *dst, const __u8 *src)
{
	__builtin_memcpy(dst, src, 16);
}

static __always_inline __u16 csum_fold(__u64 s)
{
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)s;
}

/*
 * csum_diff16 is the one's-complement difference between n 16-bit words at
 * from and at to, for an incremental update: HC' = ~(~HC + ~m + m').
 */
static __always_inline __u64 csum_diff16(const __u16 *from, const __u16 *to, int n)
{
	__u64 s = 0;

#pragma unroll
	for (int i = 0; i < 8; i++) {
		if (i >= n)
			break;
		s += (__u16)~from[i];
		s += to[i];
	}
	return s;
}

/*
 * csum_diff32 is csum_diff16 over n 32-bit words: one's-complement sums
 * fold to the same 16 bits from words of any width, in half the steps.
 * The words may be unaligned in the packet; x86 and arm64 load them so.
 */
static __always_inline __u64 csum_diff32(const void *from, const void *to, int n)
{
	const __u32 *f = from, *t = to;
	__u64 s = 0;

#pragma unroll
	for (int i = 0; i < 4; i++) {
		if (i >= n)
			break;
		s += (__u32)~f[i];
		s += t[i];
	}
	return s;
}

/*
 * csum_apply updates the checksum at check by diff, a sum of differences
 * below 2^47 (every caller's is far below). One 16-bit fold brings the sum
 * under 2^32; the high half of x + rotl(x, 16) is then the one's-complement
 * sum of x's halves, end-around carry included: fewer steps than
 * csum_fold, on the path of every forwarded frame.
 */
static __always_inline void csum_apply(__u16 *check, __u64 diff)
{
	__u64 s = (__u64)(__u16)~*check + diff;
	__u32 x;

	s = (s & 0xffff) + (s >> 16);
	x = (__u32)s;
	x += (x << 16) | (x >> 16);
	*check = ~(__u16)(x >> 16);
}

static __always_inline __u32 rotl32(__u32 x, int r)
{
	return (x << r) | (x >> (32 - r));
}

static __always_inline __u32 hash_mix(__u32 h, __u32 k)
{
	k *= 0xcc9e2d51U;
	k = rotl32(k, 15);
	k *= 0x1b873593U;
	h ^= k;
	h = rotl32(h, 13);
	return h * 5 + 0xe6546b64U;
}

/*
 * flow_hash hashes the 5-tuple only, never anything local to the node, so
 * that every node maps a flow to the same Maglev slot (ECMP may move a flow
 * between nodes mid-connection). MurmurHash3's mixing over the words of the
 * addresses (as they lie in memory, little-endian loads), the ports
 * ((sport << 16) | dport, host order) and the protocol.
 */
static __always_inline __u32 flow_hash(const struct flow_key *k)
{
	const __u32 *s = (const __u32 *)k->src;
	const __u32 *d = (const __u32 *)k->dst;
	__u32 h = FLOW_HASH_SEED;

	h = hash_mix(h, s[0]);
	h = hash_mix(h, s[1]);
	h = hash_mix(h, s[2]);
	h = hash_mix(h, s[3]);
	h = hash_mix(h, d[0]);
	h = hash_mix(h, d[1]);
	h = hash_mix(h, d[2]);
	h = hash_mix(h, d[3]);
	h = hash_mix(h, ((__u32)k->sport << 16) | k->dport);
	h = hash_mix(h, k->proto);
	h ^= 40;
	h ^= h >> 16;
	h *= 0x85ebca6bU;
	h ^= h >> 13;
	h *= 0xc2b2ae35U;
	h ^= h >> 16;
	return h;
}

/* client_hash hashes the source address alone (FP_VIP_AFFINITY_CLIENT). */
static __always_inline __u32 client_hash(const struct flow_key *k)
{
	const __u32 *s = (const __u32 *)k->src;
	__u32 h = FLOW_HASH_SEED;

	h = hash_mix(h, s[0]);
	h = hash_mix(h, s[1]);
	h = hash_mix(h, s[2]);
	h = hash_mix(h, s[3]);
	h ^= 16;
	h ^= h >> 16;
	h *= 0x85ebca6bU;
	h ^= h >> 13;
	h *= 0xc2b2ae35U;
	h ^= h >> 16;
	return h;
}

/* pick_hash is the hash that places a new flow of vip. */
static __always_inline __u32 pick_hash(const struct vip_info *vip, const struct flow_key *k)
{
	if (vip->flags & FP_VIP_AFFINITY_CLIENT)
		return client_hash(k);
	return flow_hash(k);
}

/*
 * vip_filter_bit is the bit of fp_vip_filter for a TCP/UDP VIP entry; the
 * agent computes the same (fastpath.VIPFilterBit). The address words are
 * folded (an IPv4 address has three zero words), then mixed with the port,
 * protocol and family by MurmurHash3's finaliser.
 */
static __always_inline __u32 vip_filter_bit(const __u8 *addr, __u8 family, __u16 port, __u8 proto)
{
	const __u32 *a = (const __u32 *)addr;
	__u32 x = a[0] ^ a[1] ^ a[2] ^ a[3];

	x = x * 0x9e3779b1U ^ (((__u32)port << 16) | ((__u32)proto << 8) | family);
	x ^= x >> 16;
	x *= 0x85ebca6bU;
	x ^= x >> 13;
	x *= 0xc2b2ae35U;
	x ^= x >> 16;
	return x & (VIP_FILTER_BITS - 1);
}

static __always_inline int vip_filter_has(__u32 bit)
{
	__u32 word = bit / 64;
	__u64 *w = bpf_map_lookup_elem(&fp_vip_filter, &word);

	return w && (*w & (1ULL << (bit % 64)));
}

/*
 * maybe_vip is false when the prefilter proves that no TCP/UDP VIP entry
 * (the port's or the whole VIP's) matches k; without the prefilter it is
 * always true.
 */
static __always_inline int maybe_vip(const struct node_config *cfg, const struct flow_key *k)
{
	if (!(cfg->flags & FP_CFG_VIP_FILTER))
		return 1;
	return vip_filter_has(vip_filter_bit(k->dst, k->family, k->dport, k->proto)) ||
	       vip_filter_has(vip_filter_bit(k->dst, k->family, 0, k->proto));
}

/*
 * parse_l4 reads ports and flags of the L4 header at off. An ICMP header is
 * read too (type and code), for echo and error handling. end is where the IP
 * packet ends by its own length: a header past it (in Ethernet padding) or
 * a length field that does not fit is malformed.
 */
static __always_inline int parse_l4(void *data, void *data_end, struct pkt *p, __u32 off, __u32 end)
{
	p->l4_off = off;
	switch (p->key.proto) {
	case IPPROTO_TCP: {
		struct tcphdr *th = data + off;

		if ((void *)(th + 1) > data_end || off + sizeof(*th) > end)
			return PARSE_MALFORMED;
		if ((th->doff_res >> 4) < 5 || off + (th->doff_res >> 4) * 4 > end)
			return PARSE_MALFORMED;
		p->key.sport = fp_ntohs(th->source);
		p->key.dport = fp_ntohs(th->dest);
		p->tcp_flags = th->flags;
		return PARSE_OK;
	}
	case IPPROTO_UDP: {
		struct udphdr *uh = data + off;
		__u32 len;

		if ((void *)(uh + 1) > data_end || off + sizeof(*uh) > end)
			return PARSE_MALFORMED;
		len = fp_ntohs(uh->len);
		if (len < sizeof(*uh) || off + len > end)
			return PARSE_MALFORMED;
		p->key.sport = fp_ntohs(uh->source);
		p->key.dport = fp_ntohs(uh->dest);
		return PARSE_OK;
	}
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6: {
		struct icmphdr *ih = data + off;

		if ((void *)(ih + 1) > data_end || off + sizeof(*ih) > end)
			return PARSE_MALFORMED;
		p->icmp_type = ih->type;
		p->icmp_code = ih->code;
		return PARSE_OK;
	}
	}
	return PARSE_OTHER_L4;
}

static __always_inline int parse_ipv4(void *data, void *data_end, struct pkt *p, __u32 off)
{
	struct iphdr *iph = data + off;
	__u32 hlen;

	if ((void *)(iph + 1) > data_end)
		return PARSE_MALFORMED;
	if (iph->version != 4 || iph->ihl < 5)
		return PARSE_MALFORMED;
	hlen = iph->ihl * 4;
	p->l3_len = fp_ntohs(iph->tot_len);
	if (p->l3_len < hlen || data + off + p->l3_len > data_end)
		return PARSE_MALFORMED;
	if (fp_ntohs(iph->frag_off) & (IP_MF | IP_OFFMASK))
		return PARSE_FRAGMENT;
	p->key.family = FP_FAMILY_IPV4;
	p->key.proto = iph->protocol;
	p->tos = iph->tos;
	__builtin_memcpy(p->key.src, &iph->saddr, 4);
	__builtin_memcpy(p->key.dst, &iph->daddr, 4);
	return parse_l4(data, data_end, p, off + hlen, off + p->l3_len);
}

static __always_inline int parse_ipv6(void *data, void *data_end, struct pkt *p, __u32 off)
{
	struct ipv6hdr *ip6 = data + off;
	__u32 end;
	__u8 nexthdr;

	if ((void *)(ip6 + 1) > data_end)
		return PARSE_MALFORMED;
	if (ip6->version != 6)
		return PARSE_MALFORMED;
	p->l3_len = fp_ntohs(ip6->payload_len) + sizeof(*ip6);
	if (data + off + p->l3_len > data_end)
		return PARSE_MALFORMED;
	/* Payload length 0 announces a jumbogram: the kernel's business. */
	if (p->l3_len == sizeof(*ip6))
		return PARSE_OTHER_L4;
	end = off + p->l3_len;
	p->key.family = FP_FAMILY_IPV6;
	p->tos = (ip6->priority << 4) | (ip6->flow_lbl[0] >> 4);
	copy16(p->key.src, ip6->saddr);
	copy16(p->key.dst, ip6->daddr);
	nexthdr = ip6->nexthdr;
	off += sizeof(*ip6);

#pragma unroll
	for (int i = 0; i < MAX_IPV6_EXT; i++) {
		struct ipv6_opt_hdr *oh = data + off;

		switch (nexthdr) {
		case IPPROTO_HOPOPTS:
		case IPPROTO_ROUTING:
		case IPPROTO_DSTOPTS:
			if ((void *)(oh + 1) > data_end || off + sizeof(*oh) > end)
				return PARSE_MALFORMED;
			nexthdr = oh->nexthdr;
			off += ((__u32)oh->hdrlen + 1) * 8;
			if (off > end)
				return PARSE_MALFORMED;
			continue;
		case IPPROTO_AH:
			if ((void *)(oh + 1) > data_end || off + sizeof(*oh) > end)
				return PARSE_MALFORMED;
			nexthdr = oh->nexthdr;
			off += ((__u32)oh->hdrlen + 2) * 4;
			if (off > end)
				return PARSE_MALFORMED;
			continue;
		case IPPROTO_FRAGMENT:
			return PARSE_FRAGMENT;
		}
		break;
	}
	switch (nexthdr) {
	case IPPROTO_HOPOPTS:
	case IPPROTO_ROUTING:
	case IPPROTO_DSTOPTS:
	case IPPROTO_AH:
	case IPPROTO_FRAGMENT:
		/* More extension headers than we walk: the kernel decides. */
		return PARSE_OTHER_L4;
	}
	p->key.proto = nexthdr;
	return parse_l4(data, data_end, p, off, end);
}

/*
 * parse reads Ethernet, at most one VLAN tag, IPv4 or IPv6 and the L4
 * header into p. Bounds are checked against data_end at every step, so a
 * truncated frame is PARSE_MALFORMED and never read past its end.
 */
static __always_inline int parse(struct xdp_md *ctx, struct pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u32 off = sizeof(*eth);
	__be16 proto;

	if ((void *)(eth + 1) > data_end)
		return PARSE_MALFORMED;
	/*
	 * Taken here, as a difference of packet pointers: computed later from
	 * the context's 32-bit fields, clang may spill half a packet pointer,
	 * which the verifier refuses.
	 */
	p->frame_len = data_end - data;
	proto = eth->h_proto;
	if (proto == fp_htons(ETH_P_8021Q) || proto == fp_htons(ETH_P_8021AD)) {
		struct vlan_hdr *vh = data + off;

		if ((void *)(vh + 1) > data_end)
			return PARSE_MALFORMED;
		proto = vh->encap_proto;
		off += sizeof(*vh);
	}
	p->l3_off = off;
	if (proto == fp_htons(ETH_P_IP))
		return parse_ipv4(data, data_end, p, off);
	if (proto == fp_htons(ETH_P_IPV6))
		return parse_ipv6(data, data_end, p, off);
	return PARSE_NOT_IP;
}

#endif /* NOVAEDGE_FASTPATH_HELPERS_H */
