/*
 * bench_csum.h: incremental Internet checksum updates (RFC 1624, eqn. 3:
 * HC' = ~(~HC + ~m + m')) for the XDP benchmark's programs, which change a
 * few header words of frames whose checksums are already valid. The one's
 * complement sum does not depend on byte order, so words are summed as they
 * lie in memory.
 */
#ifndef NOVAEDGE_BENCH_CSUM_H
#define NOVAEDGE_BENCH_CSUM_H

#include "include/uapi.h"
#include "include/net.h"
#include "include/bpf_helpers.h"

/* bench_csum_fold folds a 32-bit one's complement sum into 16 bits. */
static __always_inline __u16 bench_csum_fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)sum;
}

/* bench_csum_replace2 returns check updated for a 16-bit word from -> to. */
static __always_inline __u16 bench_csum_replace2(__u16 check, __u16 from, __u16 to)
{
	__u32 sum = (__u16)~check;

	sum += (__u16)~from;
	sum += to;
	return (__u16)~bench_csum_fold(sum);
}

/* bench_csum_replace4 returns check updated for a 32-bit word from -> to. */
static __always_inline __u16 bench_csum_replace4(__u16 check, __u32 from, __u32 to)
{
	__u32 sum = (__u16)~check;

	sum += (__u16)~(from & 0xffff);
	sum += (__u16)~(from >> 16);
	sum += to & 0xffff;
	sum += to >> 16;
	return (__u16)~bench_csum_fold(sum);
}

/*
 * bench_udp_check maps a computed UDP checksum to its wire form: 0 means
 * "no checksum" in UDP over IPv4, so a computed 0 is sent as 0xffff.
 */
static __always_inline __u16 bench_udp_check(__u16 check)
{
	return check ? check : 0xffff;
}

#endif /* NOVAEDGE_BENCH_CSUM_H */
