/*
 * decap_structs.h: types shared between the DSR decapsulation program and
 * user space (fastpath/decap). bpf2go generates their Go declarations from
 * BTF (-type), so they are never mirrored by hand.
 */
#ifndef NOVAEDGE_DECAP_STRUCTS_H
#define NOVAEDGE_DECAP_STRUCTS_H

#include "include/uapi.h"

/*
 * enum counter indexes decap_counters. Every packet the program sees is
 * counted exactly once, under the first of these that describes it, so the
 * counters add up to the packets seen.
 */
enum counter {
	/* Decapsulated, by encapsulation: inner family IN outer family. */
	COUNTER_IP4_IN_IP4 = 0,
	COUNTER_IP6_IN_IP6,
	COUNTER_IP6_IN_IP4,
	COUNTER_IP4_IN_IP6,
	/* Decapsulated GUE (variant 1, IP in UDP), by outer family. */
	COUNTER_GUE_IP4,
	COUNTER_GUE_IP6,
	/* Passed unchanged: not IP, or IP but not an encapsulation we strip. */
	COUNTER_PASSED,
	/*
	 * Passed unchanged: an encapsulation, but the allow-list is on and
	 * does not hold its outer destination.
	 */
	COUNTER_NOT_LOCAL,
	/* Passed unchanged: an IPv4 fragment, which is never looked into. */
	COUNTER_FRAGMENT,
	/*
	 * Dropped: a truncated or inconsistent header on the way to an
	 * inner packet (outer IP, UDP to the GUE port, inner IP).
	 */
	COUNTER_MALFORMED,
	/* Number of counters; not a counter. */
	COUNTER_MAX,
};

/* struct config is the program's only entry of decap_config. */
struct config {
	/*
	 * UDP destination port of GUE packets, in host byte order; 0 means
	 * DECAP_DEFAULT_GUE_PORT.
	 */
	__u16 gue_port;
	/*
	 * Non-zero: decapsulate only packets whose outer destination is in
	 * decap_addrs. Zero: every encapsulation is stripped.
	 */
	__u16 local_only;
};

/*
 * struct local_addr is a key of decap_addrs: an IPv6 address, or an IPv4
 * one mapped into IPv6 (::ffff:a.b.c.d, RFC 4291 2.5.5.2), so one map
 * serves both families.
 */
struct local_addr {
	__u8 addr[16];
};

#endif /* NOVAEDGE_DECAP_STRUCTS_H */
