/*
 * sockmap_structs.h: types shared between the sockmap splicing program and
 * user space. bpf2go generates their Go declarations from BTF (-type), so
 * they are never mirrored by hand.
 */
#ifndef NOVAEDGE_SOCKMAP_STRUCTS_H
#define NOVAEDGE_SOCKMAP_STRUCTS_H

#include "include/uapi.h"

/*
 * struct dir_stats counts what the verdict program did with the bytes
 * arriving on one socket of a spliced pair. User space reads it to know when
 * everything that arrived has been handed to the peer, before it passes an
 * end of stream on.
 */
struct dir_stats {
	/* Bytes redirected to the peer socket's egress. */
	__u64 redirected_bytes;
	/* Bytes left on the arriving socket because no peer was in the map. */
	__u64 passed_bytes;
};

#endif /* NOVAEDGE_SOCKMAP_STRUCTS_H */
