/*
 * quicsteer.bpf.c: steers the QUIC packets arriving on a UDP reuseport group
 * to the agent process that owns their connection, so that HTTP/3
 * connections survive an agent restart. Every process serving the group has
 * a generation (one byte) and a socket in quicsteer_socks at that
 * generation; its QUIC servers issue connection IDs whose first byte is the
 * generation. Attached with SO_ATTACH_REUSEPORT_EBPF, the program picks the
 * socket for every datagram:
 *
 *   - a long-header Initial or 0-RTT packet starts a connection: it goes to
 *     the newest generation (quicsteer_newest), i.e. the new process;
 *   - any other QUIC packet goes to the generation in the first byte of its
 *     destination connection ID (short header: at offset 1; long header:
 *     length at offset 5, ID at offset 6);
 *   - a packet that is not QUIC-shaped, or whose generation has no socket
 *     (that process has exited: closing a socket removes it from the map),
 *     goes to the newest generation.
 *
 * If even the newest has no socket the program selects nothing and the
 * kernel picks a socket of the group by hash, as without a program.
 *
 * For UDP the kernel runs the program with the packet starting at the UDP
 * header (skb->data after the IP header was pulled), so the QUIC payload
 * starts QUICSTEER_UDP_HLEN bytes in; bpf_skb_load_bytes reads relative to
 * that start and also works for non-linear packets.
 */
#include "include/uapi.h"
#include "include/bpf_helpers.h"
#include "quicsteer_consts.h"
#include "quicsteer_maps.h"
#include "quicsteer_structs.h"

/*
 * The kernel checks this string only for GPL-only helpers, which the program
 * does not call; it states the terms the kernel-facing object is offered on.
 */
char __license[] SEC("license") = "Dual BSD/GPL";

/* A generation that names no socket: the packet is for the newest. */
#define NO_GENERATION 0xffffffffU

/*
 * starts_connection says whether a long-header packet of the given version
 * and type bits opens a connection (Initial or 0-RTT). Versions the program
 * does not know are treated as new connections: the newest process answers
 * them with version negotiation.
 */
static __always_inline int starts_connection(__u32 version, __u8 type)
{
	switch (version) {
	case QUIC_VERSION_1:
		return type == 0 || type == 1; /* Initial, 0-RTT */
	case QUIC_VERSION_2:
		return type == 1 || type == 2; /* Initial, 0-RTT (RFC 9369 3.2) */
	}
	return 1;
}

/*
 * generation_of returns the generation that owns the packet, or
 * NO_GENERATION when the newest process should take it.
 */
static __always_inline __u32 generation_of(struct sk_reuseport_md *ctx)
{
	__u8 hdr[7];
	__u32 version;

	/* First byte, then (long header) version, DCID length, DCID[0]. */
	if (bpf_skb_load_bytes(ctx, QUICSTEER_UDP_HLEN, hdr, 2) < 0)
		return NO_GENERATION;
	if (!(hdr[0] & QUIC_LONG_HEADER)) {
		/*
		 * Short header: the fixed bit must be set (the servers do not
		 * offer grease_quic_bit) and a whole connection ID must follow.
		 */
		if (!(hdr[0] & QUIC_FIXED_BIT))
			return NO_GENERATION;
		if (ctx->len < QUICSTEER_UDP_HLEN + 1 + QUICSTEER_CID_LEN)
			return NO_GENERATION;
		return hdr[1];
	}
	if (bpf_skb_load_bytes(ctx, QUICSTEER_UDP_HLEN, hdr, sizeof(hdr)) < 0)
		return NO_GENERATION;
	version = ((__u32)hdr[1] << 24) | ((__u32)hdr[2] << 16) | ((__u32)hdr[3] << 8) | hdr[4];
	if (starts_connection(version, (hdr[0] & QUIC_LONG_TYPE_MASK) >> QUIC_LONG_TYPE_SHIFT))
		return NO_GENERATION;
	/* Handshake (or Retry, never sent by clients): ours has our length. */
	if (hdr[5] != QUICSTEER_CID_LEN)
		return NO_GENERATION;
	return hdr[6];
}

/* count adds one to the counter of what happened to a datagram. */
static __always_inline void count(enum quicsteer_stat stat)
{
	__u64 *n = bpf_map_lookup_elem(&quicsteer_stats, &stat);

	if (n)
		*n += 1;
}

SEC("sk_reuseport")
int quicsteer_select(struct sk_reuseport_md *ctx)
{
	__u32 zero = 0;
	__u32 gen = generation_of(ctx);
	__u32 *newest;

	if (gen != NO_GENERATION && bpf_sk_select_reuseport(ctx, &quicsteer_socks, &gen, 0) == 0) {
		count(QUICSTEER_STAT_BY_CID);
		return SK_PASS;
	}
	newest = bpf_map_lookup_elem(&quicsteer_newest, &zero);
	if (newest) {
		gen = *newest;
		if (bpf_sk_select_reuseport(ctx, &quicsteer_socks, &gen, 0) == 0) {
			count(QUICSTEER_STAT_NEWEST);
			return SK_PASS;
		}
	}
	/* Nothing selected: the kernel picks by hash among the group. */
	count(QUICSTEER_STAT_UNSELECTED);
	return SK_PASS;
}
