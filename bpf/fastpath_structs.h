/*
 * fastpath_structs.h: keys, values and enums shared between the XDP fast
 * path and user space. bpf2go generates their Go declarations from BTF
 * (-type), so they are never mirrored by hand; bpftool prints them by name.
 *
 * Addresses are 16 bytes: an IPv6 address, or an IPv4 address in the first
 * four bytes with the rest zero, always in network order. They sit at
 * offsets that are multiples of four and are declared so (ADDR), which lets
 * the compiler copy and compare them a word at a time instead of a byte at
 * a time; the layout is the same either way. Ports in map keys
 * and values are in host order, so bpftool and Go read them plainly.
 */
#ifndef NOVAEDGE_FASTPATH_STRUCTS_H
#define NOVAEDGE_FASTPATH_STRUCTS_H

#include "include/uapi.h"

#define ADDR __attribute__((aligned(4)))

/* enum fp_family is the address family of keys and backends. */
enum fp_family {
	FP_FAMILY_NONE = 0,
	FP_FAMILY_IPV4 = 4,
	FP_FAMILY_IPV6 = 6,
};

/*
 * enum fp_forward says what the fast path does with a VIP's packets.
 * FP_FWD_PASS hands them to the kernel (the slow path listens there).
 */
enum fp_forward {
	FP_FWD_PASS = 0,
	/* DNAT to the backend, SNAT to the node address and a BPF-allocated port. */
	FP_FWD_NAT = 1,
	/* DNAT only: the client address is kept; replies must route via the node. */
	FP_FWD_NAT_KEEP_CLIENT = 2,
	/* DSR: IPv4-in-IPv4 or IPv6-in-IPv6 (outer family = backend's). */
	FP_FWD_DSR_IPIP = 3,
	/* DSR: IP in UDP (GUE variant 1) to the backend's gue_port. */
	FP_FWD_DSR_GUE = 4,
	/* DSR: MAC rewrite only, backend on the same L2 segment. */
	FP_FWD_DSR_L2 = 5,
};

/* Flags of struct vip_info. */
enum fp_vip_flags {
	/* Answer ICMP / ICMPv6 echo requests to the address (address entries). */
	FP_VIP_ECHO = 1 << 0,
	/*
	 * Session affinity on the client address (a Service's sessionAffinity
	 * ClientIP): new flows are placed by the source address alone, so
	 * every connection of a client reaches the same backend while the
	 * backends do not change.
	 */
	FP_VIP_AFFINITY_CLIENT = 1 << 1,
};

/*
 * struct vip_key selects a VIP entry. port 0 is the whole-VIP wildcard for
 * proto; proto 0 with port 0 is the address entry that marks an address as
 * a VIP (ICMP echo, ICMP errors for its flows).
 */
struct vip_key {
	__u8 addr[16] ADDR;
	__u16 port;
	__u8 proto;
	__u8 family;
};

/* struct vip_info is what the fast path knows of a VIP entry. */
struct vip_info {
	/* Index into maglev_tables and vip_stats; 0 for address entries. */
	__u32 id;
	/* enum fp_vip_flags. */
	__u32 flags;
	/* enum fp_forward. */
	__u8 forward;
	__u8 pad;
	/* UDP destination port of GUE (FP_FWD_DSR_GUE); 0 means 6080. */
	__u16 gue_port;
};

/* Flags of struct backend. */
enum fp_backend_flags {
	/* The entry is in use; an unused array slot has no flags. */
	FP_BACKEND_ACTIVE = 1 << 0,
};

/* struct backend is one endpoint, indexed by its ID in backends. */
struct backend {
	__u8 addr[16] ADDR;
	__u16 port;
	__u8 family;
	__u8 flags;
};

/*
 * struct flow_key is a 5-tuple as it appears in a packet: for conntrack the
 * client → VIP direction, for nat the backend → node (or client) direction.
 */
struct flow_key {
	__u8 src[16] ADDR;
	__u8 dst[16] ADDR;
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 family;
	__u16 pad;
};

/*
 * struct flow_key4 is the struct flow_key of an IPv4 flow, the key of
 * fp_ct4_tcp and fp_ct4_udp: the family and the protocol are implied by the
 * map. 12 bytes instead of 40: the kernel hashes the whole key on every
 * lookup (htab_map_hash took a third of a conntrack hit's samples in perf),
 * and jhash hashes three words in one final round where four take a mixing
 * round more (a conntrack hit 3-4 ns cheaper than with the 16-byte key that
 * carried the protocol, perf/xdpcost).
 */
struct flow_key4 {
	__u8 src[4] ADDR;
	__u8 dst[4] ADDR;
	__u16 sport;
	__u16 dport;
};

/*
 * struct flow_cache_entry is one CPU's copy of what forwarding a packet of
 * an open IPv4 flow needs from its conntrack entry (see fp_flow_cache),
 * padded to a cache line.
 */
struct flow_cache_entry {
	struct flow_key4 key;
	__u8 proto;
	/* enum fp_forward. */
	__u8 forward;
	__u16 nat_port;
	__u32 backend_id;
	__u32 vip_id;
	__u32 hash;
	/* The conntrack entry's vip_epoch; the copy serves only while it is node_config's. */
	__u32 vip_epoch;
	/* The program's clock until which the copy serves: its flow's next refresh. */
	__u64 valid_until;
	__u16 gue_port;
	__u16 pad;
	/*
	 * Packets (and their bytes) this copy sent with XDP_TX and has not
	 * yet added to the counters: each is one rx, one ct_hit, one tx, and
	 * one packet of vip_id's and backend_id's traffic. The program adds
	 * them when it writes the slot again (within TOUCH_INTERVAL_NS while
	 * the flow lasts); readers of the counters add what slots still hold
	 * (fastpath/stats.go).
	 */
	__u32 packets;
	__u64 bytes;
	__u64 spare;
};

_Static_assert(sizeof(struct flow_cache_entry) == 64, "a flow cache slot is one cache line");

/* enum ct_state is the TCP state a tracked flow is in (UDP is always OPEN). */
enum ct_state {
	CT_SYN = 1,
	CT_OPEN = 2,
	CT_CLOSING = 3,
};

/*
 * struct ct_value is a tracked flow: the backend chosen at its first packet,
 * and a copy of its VIP entry so that a packet of a tracked flow needs no
 * VIP lookup. The copy is valid while vip_epoch equals node_config's
 * vip_epoch (and is not 0): any change of the VIP entries bumps that, and
 * the next packet of the flow looks its VIP up again.
 */
struct ct_value {
	/*
	 * CLOCK_MONOTONIC ns, to the timer tick, of the last packet (refreshed
	 * at most every second; see tick_ns in fastpath.bpf.c).
	 */
	__u64 last_seen;
	__u32 backend_id;
	__u32 vip_id;
	/* SNAT source port (FP_FWD_NAT only), host order. */
	__u16 nat_port;
	/* enum ct_state. */
	__u8 state;
	/* The VIP entry's enum fp_forward, as of vip_epoch. */
	__u8 forward;
	/* The flow hash, reused for tunnel entropy without rehashing. */
	__u32 hash;
	/* node_config's vip_epoch when forward and gue_port were copied; 0: never. */
	__u32 vip_epoch;
	/* The VIP entry's gue_port, as of vip_epoch. */
	__u16 gue_port;
	__u16 pad;
};

/* struct nat_value turns a backend's reply back into the VIP's. */
struct nat_value {
	__u64 last_seen;
	__u8 client[16] ADDR;
	__u8 vip[16] ADDR;
	__u16 client_port;
	__u16 vip_port;
	__u32 vip_id;
};

/*
 * struct node_config is the node-wide configuration (fp_config[0]), written by
 * the agent before any VIP refers to it.
 */
struct node_config {
	/* Node addresses: the SNAT source and the outer source of DSR tunnels. */
	__u8 node_v4[4] ADDR;
	__u8 node_v6[16] ADDR;
	/* SNAT source ports, inclusive, host order; reserved from the host's ephemeral range by the agent. */
	__u16 nat_port_min;
	__u16 nat_port_max;
	/* Idle lifetimes in seconds; 0 means the built-in default. */
	__u32 tcp_syn_timeout;
	__u32 tcp_timeout;
	__u32 tcp_closing_timeout;
	__u32 udp_timeout;
	/* enum fp_config_flags. */
	__u32 flags;
	/*
	 * Bumped by the agent after every change of fp_vips, so that tracked
	 * flows look their VIP up again (see struct ct_value); 0 turns the
	 * copies in conntrack off (every packet looks its VIP up).
	 */
	__u32 vip_epoch;
};

/* Flags of struct node_config. */
enum fp_config_flags {
	/* Some VIP uses NAT: look replies up in fp_nat. */
	FP_CFG_NAT = 1 << 0,
	/*
	 * fp_vip_filter holds a bit for every TCP/UDP VIP entry: a packet whose
	 * bits are clear is no VIP's, without a VIP or conntrack lookup.
	 */
	FP_CFG_VIP_FILTER = 1 << 1,
	/*
	 * Every NAT VIP translates the source (none keeps the client address),
	 * so every fp_nat key is towards a node address and a port of
	 * [nat_port_min, nat_port_max]: other traffic skips the fp_nat lookup.
	 * (A mapping made before the node address or the range changed is
	 * then no longer looked up; such a flow was SNATed to the old ones.)
	 */
	FP_CFG_NAT_SNAT_ONLY = 1 << 2,
};

/*
 * struct nexthop is a cached bpf_fib_lookup result for a backend, per CPU:
 * the FIB and neighbour lookup is the most expensive step of forwarding, and
 * a backend's next hop rarely changes. Entries expire after
 * NEXTHOP_TTL_NS, so route and neighbour changes take effect within it.
 */
struct nexthop {
	/* CLOCK_MONOTONIC ns (the program's clock) after which the entry is looked up again. */
	__u64 expires;
	/* The ingress interface the lookup was made for. */
	__u32 ingress;
	/* The egress interface. */
	__u32 ifindex;
	/* The longest L3 length the FIB accepted for this next hop. */
	__u32 mtu;
	__u8 smac[6] __attribute__((aligned(2)));
	__u8 dmac[6] __attribute__((aligned(2)));
};

/* struct fp_traffic counts packets and bytes (per CPU, per VIP or backend). */
struct fp_traffic {
	__u64 packets;
	__u64 bytes;
};

/*
 * enum fp_counter indexes the per-CPU counters: what happened to packets,
 * with every drop and every pass to the kernel by reason.
 */
enum fp_counter {
	FP_C_RX = 0,
	FP_C_PASS_NOT_IP,
	FP_C_PASS_FRAGMENT,
	FP_C_PASS_NOT_VIP,
	FP_C_PASS_SLOW_PATH,
	FP_C_PASS_NO_NEIGH,
	FP_C_PASS_EGRESS_NO_XDP,
	FP_C_PASS_FIB_OTHER,
	FP_C_PASS_ICMP,
	FP_C_PASS_MALFORMED,
	FP_C_PASS_OTHER_PROTO,
	FP_C_CT_HIT,
	FP_C_CT_MISS,
	FP_C_CT_CREATED,
	FP_C_CT_EXPIRED,
	FP_C_NAT_CREATED,
	FP_C_NAT_REPLY,
	FP_C_ICMP_ECHO,
	FP_C_ICMP_ERROR_FORWARDED,
	FP_C_TX,
	FP_C_REDIRECT,
	FP_C_DROP_MALFORMED,
	FP_C_DROP_NO_BACKEND,
	FP_C_DROP_NAT_EXHAUSTED,
	FP_C_DROP_FRAG_NEEDED,
	FP_C_DROP_HEADROOM,
	FP_C_DROP_FAMILY,
	FP_C_DROP_NO_NODE_ADDR,
	FP_C_DROP_FIB,
	FP_C_DROP_RST_NO_STATE,
	/*
	 * A DSR frame that no longer fit the path MTU once encapsulated,
	 * answered with ICMP "fragmentation needed" / ICMPv6 "packet too big"
	 * to the client (an IPv4 frame without DF is dropped instead, as
	 * FP_C_DROP_FRAG_NEEDED).
	 */
	FP_C_ICMP_TOO_BIG_SENT,
	/*
	 * An ICMP error to a VIP about a NAT flow's reply (quoting VIP →
	 * client), translated as about the backend's own packet and forwarded
	 * to the backend.
	 */
	FP_C_ICMP_NAT_TO_BACKEND,
	/*
	 * An ICMP error to the node's SNAT address about a NAT flow (quoting
	 * node → backend), translated as about the client's packet to the VIP
	 * and forwarded to the client.
	 */
	FP_C_ICMP_NAT_TO_CLIENT,
	FP_C_MAX,
};

#endif /* NOVAEDGE_FASTPATH_STRUCTS_H */
