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
#define BPF_MAP_TYPE_SOCKHASH 18

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

#endif /* NOVAEDGE_UAPI_H */
