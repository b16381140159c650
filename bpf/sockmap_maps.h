/*
 * sockmap_maps.h: the maps of the sockmap splicing program, all keyed by a
 * socket cookie (SO_COOKIE), which is unique for the life of the host, unlike
 * a 4-tuple across network namespaces.
 *
 * Two socket maps, so that a pair never has a half-inserted state in which
 * bytes arrive with nowhere to go: user space first puts both sockets into
 * sockmap_peers (no program attached there, so nothing changes for them),
 * and only then into sockmap_spliced, whose verdict program starts taking
 * each socket's bytes to a peer that is already a valid target.
 */
#ifndef NOVAEDGE_SOCKMAP_MAPS_H
#define NOVAEDGE_SOCKMAP_MAPS_H

#include "include/uapi.h"
#include "include/bpf_helpers.h"
#include "sockmap_consts.h"
#include "sockmap_structs.h"

/* Cookie of the socket bytes arrive on -> the peer socket they go out of. */
struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, 2 * SOCKMAP_MAX_PAIRS);
	__type(key, __u64);
	__type(value, __u64);
} sockmap_peers SEC(".maps");

/* Cookie of a spliced socket -> that socket; the verdict attaches here. */
struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, 2 * SOCKMAP_MAX_PAIRS);
	__type(key, __u64);
	__type(value, __u64);
} sockmap_spliced SEC(".maps");

/* Cookie of the socket bytes arrive on -> what the verdict did with them. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 2 * SOCKMAP_MAX_PAIRS);
	__type(key, __u64);
	__type(value, struct dir_stats);
} sockmap_stats SEC(".maps");

#endif /* NOVAEDGE_SOCKMAP_MAPS_H */
