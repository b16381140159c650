/*
 * net.h: on-the-wire packet headers (Ethernet, 802.1Q, IPv4, IPv6 and its
 * extension headers, TCP, UDP, ICMP, ICMPv6) and byte-order helpers, declared
 * here so that the XDP programs need neither the host's the <linux/...> headers nor
 * vmlinux.h. Every layout is fixed by its RFC; fields are in network byte
 * order as they sit in the packet.
 */
#ifndef NOVAEDGE_NET_H
#define NOVAEDGE_NET_H

#include "uapi.h"

/*
 * The programs are built for little-endian BPF only (bpf2go -target bpfel),
 * so network order is always the byte-swapped one.
 */
#define fp_htons(x) ((__be16)__builtin_bswap16((__u16)(x)))
#define fp_ntohs(x) ((__u16)__builtin_bswap16((__u16)(x)))
#define fp_htonl(x) ((__be32)__builtin_bswap32((__u32)(x)))
#define fp_ntohl(x) ((__u32)__builtin_bswap32((__u32)(x)))

#define ETH_ALEN 6
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define ETH_P_8021Q 0x8100
#define ETH_P_8021AD 0x88A8

#define IPPROTO_HOPOPTS 0
#define IPPROTO_ICMP 1
#define IPPROTO_IPIP 4
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17
#define IPPROTO_IPV6 41
#define IPPROTO_ROUTING 43
#define IPPROTO_FRAGMENT 44
#define IPPROTO_AH 51
#define IPPROTO_ICMPV6 58
#define IPPROTO_NONE 59
#define IPPROTO_DSTOPTS 60

/* IPv4 flags and fragment offset (frag_off, host order after fp_ntohs). */
#define IP_MF 0x2000
#define IP_DF 0x4000
#define IP_OFFMASK 0x1FFF

#define TCP_FIN 0x01
#define TCP_SYN 0x02
#define TCP_RST 0x04
#define TCP_ACK 0x10

#define ICMP_ECHOREPLY 0
#define ICMP_DEST_UNREACH 3
#define ICMP_FRAG_NEEDED 4
#define ICMP_ECHO 8
#define ICMPV6_PKT_TOOBIG 2
#define ICMPV6_ECHO_REQUEST 128
#define ICMPV6_ECHO_REPLY 129

struct ethhdr {
	__u8 h_dest[ETH_ALEN];
	__u8 h_source[ETH_ALEN];
	__be16 h_proto;
};

struct vlan_hdr {
	__be16 tci;
	__be16 encap_proto;
};

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

struct ipv6hdr {
	__u8 priority : 4, version : 4;
	__u8 flow_lbl[3];
	__be16 payload_len;
	__u8 nexthdr;
	__u8 hop_limit;
	__u8 saddr[16];
	__u8 daddr[16];
};

/* The generic shape of hop-by-hop, routing and destination options. */
struct ipv6_opt_hdr {
	__u8 nexthdr;
	__u8 hdrlen;
};

struct ipv6_frag_hdr {
	__u8 nexthdr;
	__u8 reserved;
	__be16 frag_off;
	__be32 identification;
};

struct tcphdr {
	__be16 source;
	__be16 dest;
	__be32 seq;
	__be32 ack_seq;
	__u8 doff_res;
	__u8 flags;
	__be16 window;
	__u16 check;
	__be16 urg_ptr;
};

struct udphdr {
	__be16 source;
	__be16 dest;
	__be16 len;
	__u16 check;
};

/* ICMP and ICMPv6 share this first word; echo adds id and sequence. */
struct icmphdr {
	__u8 type;
	__u8 code;
	__u16 checksum;
	__be16 un1;
	__be16 un2;
};

#endif /* NOVAEDGE_NET_H */
