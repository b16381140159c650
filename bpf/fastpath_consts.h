/*
 * fastpath_consts.h: sizes and tunables of the XDP fast path. Map sizes are
 * defaults; the loader (fastpath/) overrides them at load time through
 * CollectionSpec.Maps[name].MaxEntries, so these defines only set what a
 * plain build gets.
 */
#ifndef NOVAEDGE_FASTPATH_CONSTS_H
#define NOVAEDGE_FASTPATH_CONSTS_H

/* VIP IDs index maglev_tables and vip_stats; ID 0 is never used. */
#ifndef MAX_VIPS
#define MAX_VIPS 4096
#endif

/* (address, port, protocol) entries of the VIP table. */
#ifndef MAX_VIP_ENTRIES
#define MAX_VIP_ENTRIES 16384
#endif

/* Backend IDs index backends and backend_stats; ID 0 means "no backend". */
#ifndef MAX_BACKENDS
#define MAX_BACKENDS 65536
#endif

/* Slots of one Maglev table: a prime (the Maglev paper's M). */
#ifndef MAGLEV_SIZE
#define MAGLEV_SIZE 65537
#endif

/* Tracked flows (client → VIP 5-tuples). */
#ifndef CT_SIZE
#define CT_SIZE 262144
#endif

/*
 * Slots of the flow cache per CPU, a power of two (2^10 × 64 bytes: 64 KiB
 * per CPU, small enough to stay in the CPU's caches); the loader sets the
 * size (this many times the possible CPUs) and flow_cache_bits together.
 */
#ifndef FLOW_CACHE_SIZE
#define FLOW_CACHE_SIZE 1024
#endif
#define FLOW_CACHE_BITS 10

/* NAT reply mappings (backend → node or client 5-tuples). */
#ifndef NAT_SIZE
#define NAT_SIZE 262144
#endif

/* Interfaces with the fast path attached that redirected frames may use. */
#ifndef MAX_TX_PORTS
#define MAX_TX_PORTS 64
#endif

/*
 * Bits of the VIP prefilter (fp_vip_filter), a power of two; 64 Ki bits
 * (8 KiB) keep false positives rare with thousands of VIP entries.
 */
#define VIP_FILTER_BITS 65536
#define VIP_FILTER_WORDS (VIP_FILTER_BITS / 64)

/* Source ports tried for one new SNAT mapping before giving up (counted). */
#define NAT_PORT_TRIES 16

/* IPv6 extension headers walked before the packet is handed to the kernel. */
#define MAX_IPV6_EXT 6

/*
 * Timestamps of tracked flows are rewritten at most this often, so a busy
 * flow does not dirty its cache line on every packet.
 */
#define TOUCH_INTERVAL_NS 1000000000ULL

/* How long a cached next hop of a backend is used before it is looked up again. */
#define NEXTHOP_TTL_NS 1000000000ULL

/* Seed of the flow hash; fastpath/flowhash uses the same. */
#define FLOW_HASH_SEED 0x4e6f7661U

/*
 * Slots of fp_counters: more than enum fp_counter has (FP_C_MAX), so that a
 * counter added later still fits the map an older agent pinned, which the
 * loader reuses only while its size is unchanged.
 */
#define FP_COUNTER_SLOTS 64

/*
 * The largest ICMP error the fast path sends a client about a DSR frame
 * that grew past the path MTU, IP header included: 576 bytes for IPv4
 * (RFC 1812 4.3.2.3), 1280 for ICMPv6 (RFC 4443 2.4 (c)). The quote of the
 * client's packet fills the rest.
 */
#define ICMP4_ERROR_MAX 576
#define ICMP6_ERROR_MAX 1280

/* Outer headers added for DSR. */
#define OUTER_TTL 64
#define DEFAULT_GUE_PORT 6080

#endif /* NOVAEDGE_FASTPATH_CONSTS_H */
