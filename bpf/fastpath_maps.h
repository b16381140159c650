/*
 * fastpath_maps.h: the maps of the XDP fast path. The agent pins them under
 * /sys/fs/bpf/novaedge/<layout>/ and novaedgectl fastpath reads them there;
 * all carry BTF, so bpftool prints keys and values by field name.
 */
#ifndef NOVAEDGE_FASTPATH_MAPS_H
#define NOVAEDGE_FASTPATH_MAPS_H

#include "include/uapi.h"
#include "include/bpf_helpers.h"
#include "fastpath_consts.h"
#include "fastpath_structs.h"

/* VIP entries by (address, port, protocol). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_VIP_ENTRIES);
	__type(key, struct vip_key);
	__type(value, struct vip_info);
} fp_vips SEC(".maps");

/*
 * Prefilter of TCP/UDP traffic: bit vip_filter_bit(address, port, protocol)
 * is set for every VIP entry (port 0 for a whole-VIP entry), read only when
 * fp_config has FP_CFG_VIP_FILTER. A clear bit proves the packet is no
 * VIP's; a set bit may be another's (a hash collision), so the VIP table
 * still decides.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, VIP_FILTER_WORDS);
	__type(key, __u32);
	__type(value, __u64);
} fp_vip_filter SEC(".maps");

/* The template of one VIP's Maglev table: slot → backend ID. */
struct maglev_table {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAGLEV_SIZE);
	__type(key, __u32);
	__type(value, __u32);
};

/* Maglev tables by VIP ID; a new table is swapped in with one update. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, MAX_VIPS);
	__type(key, __u32);
	__array(values, struct maglev_table);
} fp_maglev SEC(".maps");

/* Backends by ID. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct backend);
} fp_backends SEC(".maps");

/* Tracked IPv6 flows: client → VIP 5-tuple → backend (LRU: the oldest go first). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, CT_SIZE);
	__type(key, struct flow_key);
	__type(value, struct ct_value);
} fp_conntrack SEC(".maps");

/* Tracked IPv4 TCP flows, as fp_conntrack (see struct flow_key4). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, CT_SIZE);
	__type(key, struct flow_key4);
	__type(value, struct ct_value);
} fp_ct4_tcp SEC(".maps");

/* Tracked IPv4 UDP flows, as fp_conntrack (see struct flow_key4). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, CT_SIZE);
	__type(key, struct flow_key4);
	__type(value, struct ct_value);
} fp_ct4_udp SEC(".maps");

/*
 * Copies of open IPv4 flows' conntrack entries: CPU c's part is indexes
 * c << flow_cache_bits on, a flow's slot in it flow_cache_slot (see
 * fastpath.bpf.c); the loader sizes it for every possible CPU.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FLOW_CACHE_SIZE);
	__type(key, __u32);
	__type(value, struct flow_cache_entry);
} fp_flow_cache SEC(".maps");

/* NAT mappings: backend → node/client 5-tuple → the client and VIP. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, NAT_SIZE);
	__type(key, struct flow_key);
	__type(value, struct nat_value);
} fp_nat SEC(".maps");

/* Node-wide configuration, one entry. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct node_config);
} fp_config SEC(".maps");

/* Interfaces running the fast path, by ifindex: redirect targets. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, MAX_TX_PORTS);
	__type(key, __u32);
	__type(value, struct bpf_devmap_val);
} fp_tx_ports SEC(".maps");

/* Cached next hops by backend ID, per CPU (see struct nexthop). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct nexthop);
} fp_nexthops SEC(".maps");

/*
 * Per-CPU scratch space for what does not fit the 512-byte stack of a
 * program that inlines nearly everything: bpf_fib_lookup's argument, and
 * the key of a NAT mapping being refreshed (never both at once). An opaque
 * value: user space never reads it.
 */
struct scratch {
	__u8 bytes[sizeof(struct bpf_fib_lookup)];
};

/* Per-CPU scratch space (see struct scratch). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} fp_scratch SEC(".maps");

/* Packets and bytes per VIP ID, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_VIPS);
	__type(key, __u32);
	__type(value, struct fp_traffic);
} fp_vip_stats SEC(".maps");

/* Packets and bytes per backend ID, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct fp_traffic);
} fp_backend_stats SEC(".maps");

_Static_assert(FP_C_MAX <= FP_COUNTER_SLOTS, "enum fp_counter outgrew FP_COUNTER_SLOTS");

/* Counters by enum fp_counter, per CPU; slots from FP_C_MAX on are spare. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FP_COUNTER_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} fp_counters SEC(".maps");

#endif /* NOVAEDGE_FASTPATH_MAPS_H */
