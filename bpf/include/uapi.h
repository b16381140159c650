/*
 * uapi.h: the few kernel UAPI types and constants NovaEdge's BPF programs use,
 * so that a build depends neither on vmlinux.h nor on the host's
 * <linux/bpf.h>. Every value here is kernel ABI (include/uapi/linux/bpf.h)
 * and never changes; add to it only what a program needs.
 */
#ifndef NOVAEDGE_UAPI_H
#define NOVAEDGE_UAPI_H

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
#define BPF_MAP_TYPE_HASH 1
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_PERCPU_ARRAY 6
#define BPF_MAP_TYPE_LRU_HASH 9
#define BPF_MAP_TYPE_ARRAY_OF_MAPS 12
#define BPF_MAP_TYPE_SOCKHASH 18
#define BPF_MAP_TYPE_DEVMAP_HASH 25

/* Flags of bpf_map_update_elem. */
#define BPF_ANY 0
#define BPF_NOEXIST 1
#define BPF_EXIST 2

/* Map creation flags. */
#define BPF_F_NO_PREALLOC (1U << 0)

/* enum sk_action: the verdict of an sk_skb program. */
enum sk_action {
	SK_DROP = 0,
	SK_PASS,
};

/* Flags of bpf_sk_redirect_hash: 0 sends to the target's egress. */
#define BPF_F_INGRESS (1ULL << 0)

/*
 * struct __sk_buff is the context of sk_skb programs. The kernel rewrites
 * accesses by offset, so only the prefix up to the last field a program
 * reads is declared; the layout is ABI.
 */
struct __sk_buff {
	__u32 len;
};

/* enum xdp_action: the verdict of an XDP program. */
enum xdp_action {
	XDP_ABORTED = 0,
	XDP_DROP,
	XDP_PASS,
	XDP_TX,
	XDP_REDIRECT,
};

/* struct xdp_md is the context of XDP programs (ABI). */
struct xdp_md {
	__u32 data;
	__u32 data_end;
	__u32 data_meta;
	__u32 ingress_ifindex;
	__u32 rx_queue_index;
	__u32 egress_ifindex;
};

/* struct bpf_devmap_val is the value of a DEVMAP / DEVMAP_HASH entry. */
struct bpf_devmap_val {
	__u32 ifindex;
	union {
		int fd;
		__u32 id;
	} bpf_prog;
};

/* Address families of bpf_fib_lookup. */
#define AF_INET 2
#define AF_INET6 10

/* Flags and return codes of bpf_fib_lookup. */
#define BPF_FIB_LOOKUP_DIRECT (1U << 0)
#define BPF_FIB_LOOKUP_OUTPUT (1U << 1)

enum {
	BPF_FIB_LKUP_RET_SUCCESS,
	BPF_FIB_LKUP_RET_BLACKHOLE,
	BPF_FIB_LKUP_RET_UNREACHABLE,
	BPF_FIB_LKUP_RET_PROHIBIT,
	BPF_FIB_LKUP_RET_NOT_FWDED,
	BPF_FIB_LKUP_RET_FWD_DISABLED,
	BPF_FIB_LKUP_RET_UNSUPP_LWT,
	BPF_FIB_LKUP_RET_NO_NEIGH,
	BPF_FIB_LKUP_RET_FRAG_NEEDED,
	BPF_FIB_LKUP_RET_NO_SRC_ADDR,
};

/* struct bpf_fib_lookup is the argument of bpf_fib_lookup (ABI). */
struct bpf_fib_lookup {
	__u8 family;
	__u8 l4_protocol;
	__be16 sport;
	__be16 dport;
	union {
		__u16 tot_len;
		__u16 mtu_result;
	} __attribute__((packed, aligned(2)));
	__u32 ifindex;
	union {
		__u8 tos;
		__be32 flowinfo;
		__u32 rt_metric;
	};
	union {
		__be32 ipv4_src;
		__u32 ipv6_src[4];
	};
	union {
		__be32 ipv4_dst;
		__u32 ipv6_dst[4];
	};
	union {
		struct {
			__be16 h_vlan_proto;
			__be16 h_vlan_TCI;
		};
		__u32 tbid;
	};
	__u8 smac[6];
	__u8 dmac[6];
};

#endif /* NOVAEDGE_UAPI_H */
