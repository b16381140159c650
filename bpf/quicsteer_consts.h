/*
 * quicsteer_consts.h: tunables and the few UAPI constants of the QUIC
 * steering program that bpf/include/uapi.h does not carry. Tunables are
 * overridable defines; they must match what user space
 * (slowpath/sockets/quicsteer) assumes.
 */
#ifndef NOVAEDGE_QUICSTEER_CONSTS_H
#define NOVAEDGE_QUICSTEER_CONSTS_H

/* enum bpf_map_type (kernel ABI): a map of sockets of reuseport groups. */
#ifndef BPF_MAP_TYPE_REUSEPORT_SOCKARRAY
#define BPF_MAP_TYPE_REUSEPORT_SOCKARRAY 20
#endif

/*
 * Length of the connection IDs the servers issue: the first byte is the
 * generation of the process that issued it, the rest is random.
 */
#ifndef QUICSTEER_CID_LEN
#define QUICSTEER_CID_LEN 8
#endif

/* Generations are one byte: 256 slots in the socket array. */
#define QUICSTEER_GENERATIONS 256

/* Size of a UDP header: the program's data starts at it (see quicsteer.bpf.c). */
#define QUICSTEER_UDP_HLEN 8

/* QUIC versions whose long-header packet types the program knows. */
#define QUIC_VERSION_1 0x00000001 /* RFC 9000 */
#define QUIC_VERSION_2 0x6b3343cf /* RFC 9369 */

/* First-byte bits of a QUIC packet (RFC 8999, RFC 9000 section 17). */
#define QUIC_LONG_HEADER 0x80
#define QUIC_FIXED_BIT 0x40
#define QUIC_LONG_TYPE_MASK 0x30
#define QUIC_LONG_TYPE_SHIFT 4

#endif /* NOVAEDGE_QUICSTEER_CONSTS_H */
