/*
 * quicsteer_structs.h: the context of SK_REUSEPORT programs, which
 * bpf/include/uapi.h does not declare. The kernel rewrites accesses by
 * offset, so the layout must be the UAPI one (struct sk_reuseport_md in
 * include/uapi/linux/bpf.h); only the prefix up to the last field a program
 * reads would be needed, the whole stable part is declared for clarity.
 */
#ifndef NOVAEDGE_QUICSTEER_STRUCTS_H
#define NOVAEDGE_QUICSTEER_STRUCTS_H

#include "include/uapi.h"

struct sk_reuseport_md {
	/* Start and end of the linear packet data (for UDP: the UDP header). */
	union {
		void *data;
		__u64 :64;
	} __attribute__((aligned(8)));
	union {
		void *data_end;
		__u64 :64;
	} __attribute__((aligned(8)));
	__u32 len;          /* whole packet length from data on */
	__u32 eth_protocol; /* network byte order */
	__u32 ip_protocol;  /* IPPROTO_UDP or IPPROTO_TCP */
	__u32 bind_inany;   /* the group is bound to an unspecified address */
	__u32 hash;         /* the kernel's flow hash, as used without a program */
};

/* What the program did with a datagram: the index of quicsteer_stats. */
enum quicsteer_stat {
	QUICSTEER_STAT_BY_CID = 0,    /* to the generation of its connection ID */
	QUICSTEER_STAT_NEWEST,        /* to the newest (new connection, not QUIC, generation gone) */
	QUICSTEER_STAT_UNSELECTED,    /* the newest has no socket either: the kernel's hash */
	QUICSTEER_STAT_MAX,
};

#endif /* NOVAEDGE_QUICSTEER_STRUCTS_H */
