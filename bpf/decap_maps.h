/*
 * decap_maps.h: the maps of the DSR decapsulation program. User space
 * (fastpath/decap) writes decap_config and decap_addrs and reads
 * decap_counters; the program only reads the first two.
 */
#ifndef NOVAEDGE_DECAP_MAPS_H
#define NOVAEDGE_DECAP_MAPS_H

#include "include/uapi.h"
#include "include/net.h"
#include "include/bpf_helpers.h"
#include "decap_consts.h"
#include "decap_structs.h"

/* Index 0 -> the GUE port and flags, changeable without a reload. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct config);
} decap_config SEC(".maps");

/* Outer destinations to decapsulate for, used if config.local_only. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DECAP_MAX_LOCAL_ADDRS);
	__type(key, struct local_addr);
	__type(value, __u8);
} decap_addrs SEC(".maps");

/* enum counter -> packets, per CPU so counting needs no atomics. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTER_MAX);
	__type(key, __u32);
	__type(value, __u64);
} decap_counters SEC(".maps");

#endif /* NOVAEDGE_DECAP_MAPS_H */
