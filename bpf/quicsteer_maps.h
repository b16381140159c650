/*
 * quicsteer_maps.h: the maps of the QUIC steering program. One pair of maps
 * (and one loaded program) serves one reuseport group, i.e. one UDP address
 * and port; the agent process that owns a generation puts its socket into
 * quicsteer_socks at that generation.
 */
#ifndef NOVAEDGE_QUICSTEER_MAPS_H
#define NOVAEDGE_QUICSTEER_MAPS_H

#include "include/uapi.h"
#include "include/bpf_helpers.h"
#include "quicsteer_consts.h"
#include "quicsteer_structs.h"

/* Generation -> the socket of the agent process of that generation. */
struct {
	__uint(type, BPF_MAP_TYPE_REUSEPORT_SOCKARRAY);
	__uint(max_entries, QUICSTEER_GENERATIONS);
	__type(key, __u32);
	__type(value, __u64);
} quicsteer_socks SEC(".maps");

/* Slot 0: the newest generation, which takes new connections. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} quicsteer_newest SEC(".maps");

/* enum quicsteer_stat -> datagrams steered that way, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, QUICSTEER_STAT_MAX);
	__type(key, enum quicsteer_stat);
	__type(value, __u64);
} quicsteer_stats SEC(".maps");

#endif /* NOVAEDGE_QUICSTEER_MAPS_H */
