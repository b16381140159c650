/*
 * decap_hdrs.h: the on-the-wire headers the DSR decapsulation program
 * (bpf/decap.bpf.c) reads: Ethernet, 802.1Q, IPv4, IPv6 and UDP, with the
 * byte-order helpers to read them. Every layout is fixed by its RFC; fields
 * are in network byte order as they sit in the packet. The names follow
 * net.h, the fast path's header of the same kind, so the program can move to
 * it by swapping the include and the hdr_ prefix of the helpers for fp_.
 */
#ifndef NOVAEDGE_DECAP_HDRS_H
#define NOVAEDGE_DECAP_HDRS_H

#include "uapi.h"

/*
 * The programs are built for little-endian BPF only (bpf2go -target bpfel),
 * so network order is always the byte-swapped one, and the bitfields below
 * are declared low nibble first.
 */
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "decap_hdrs.h assumes a little-endian target"
#endif
#define hdr_htons(x) ((__be16)__builtin_bswap16((__u16)(x)))
#define hdr_ntohs(x) ((__u16)__builtin_bswap16((__u16)(x)))

/* EtherTypes (IEEE 802). */
#define ETH_P_IP 0x0800
#define ETH_P_8021Q 0x8100
#define ETH_P_IPV6 0x86DD

/* IP protocol numbers (IANA). */
#define IPPROTO_IPIP 4
#define IPPROTO_UDP 17
#define IPPROTO_IPV6 41

/* IPv4 flags and fragment offset (frag_off, host order after hdr_ntohs). */
#define IP_MF 0x2000
#define IP_OFFMASK 0x1FFF

/* Ethernet II header, without the frame check sequence. */
struct ethhdr {
	__u8 h_dest[6];
	__u8 h_source[6];
	__be16 h_proto;
};

/* The 802.1Q tag following the MAC addresses of a tagged frame. */
struct vlan_hdr {
	__be16 tci;
	__be16 encap_proto;
};

/* IPv4 header (RFC 791); ihl counts 32-bit words, options included. */
struct iphdr {
	__u8 ihl : 4, version : 4;
	__u8 tos;
	__be16 tot_len;
	__be16 id;
	__be16 frag_off;
	__u8 ttl;
	__u8 protocol;
	__u16 check;
	__be32 saddr;
	__be32 daddr;
};

/* IPv6 fixed header (RFC 8200). */
struct ipv6hdr {
	__u8 priority : 4, version : 4;
	__u8 flow_lbl[3];
	__be16 payload_len;
	__u8 nexthdr;
	__u8 hop_limit;
	__u8 saddr[16];
	__u8 daddr[16];
};

/* UDP header (RFC 768). */
struct udphdr {
	__be16 source;
	__be16 dest;
	__be16 len;
	__u16 check;
};

#endif /* NOVAEDGE_DECAP_HDRS_H */
