/*
 * bench_uapi.h: the kernel UAPI and packet header definitions used by the
 * XDP packet-rate benchmark's programs (bpf/bench_*.bpf.c, driven by
 * perf/xdpbench). It is self-contained on purpose: the benchmark programs
 * include it instead of uapi.h, so that the fast path may grow uapi.h
 * (struct xdp_md and friends) without the two ever defining a type twice.
 * Every value is kernel ABI or a wire format and never changes.
 */
#ifndef NOVAEDGE_BENCH_UAPI_H
#define NOVAEDGE_BENCH_UAPI_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed char __s8;
typedef short __s16;
typedef int __s32;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;

/* enum bpf_map_type */
#define BPF_MAP_TYPE_PERCPU_ARRAY 6

/* enum xdp_action: the verdict of an XDP program. */
enum xdp_action {
	XDP_ABORTED = 0,
	XDP_DROP,
	XDP_PASS,
	XDP_TX,
	XDP_REDIRECT,
};

/*
 * struct xdp_md is the context of XDP programs; the kernel rewrites accesses
 * by offset. Only the prefix the programs read is declared.
 */
struct xdp_md {
	__u32 data;
	__u32 data_end;
	__u32 data_meta;
	__u32 ingress_ifindex;
};

/* Byte order: BPF targets built here are little-endian (bpfel). */
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define bench_htons(x) ((__be16)__builtin_bswap16(x))
#define bench_htonl(x) ((__be32)__builtin_bswap32(x))
#else
#define bench_htons(x) ((__be16)(x))
#define bench_htonl(x) ((__be32)(x))
#endif
#define bench_ntohs(x) bench_htons(x)
#define bench_ntohl(x) bench_htonl(x)

#define ETH_ALEN 6
#define ETH_P_IP 0x0800
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17

/* struct ethhdr: an Ethernet II header. */
struct ethhdr {
	__u8 h_dest[ETH_ALEN];
	__u8 h_source[ETH_ALEN];
	__be16 h_proto;
} __attribute__((packed));

/*
 * struct iphdr: an IPv4 header without options; version and IHL share the
 * first byte (0x45 for the only form the benchmark sends).
 */
struct iphdr {
	__u8 ver_ihl;
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

/* struct udphdr: a UDP header. */
struct udphdr {
	__be16 source;
	__be16 dest;
	__be16 len;
	__u16 check;
};

/* struct tcphdr: a TCP header without options; flags as raw bytes. */
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

#endif /* NOVAEDGE_BENCH_UAPI_H */
