/*
 * bench_consts.h: sizes and offsets of the XDP benchmark's frames, shared by
 * its programs. Overridable defines, like every tunable under bpf/.
 */
#ifndef NOVAEDGE_BENCH_CONSTS_H
#define NOVAEDGE_BENCH_CONSTS_H

/*
 * Bytes at the start of every generated frame that the generator rewrites:
 * a multiple of 8 (copied as 64-bit words) covering Ethernet + IPv4 + TCP.
 * Frames are never shorter.
 */
#ifndef BENCH_FRAME_HEAD
#define BENCH_FRAME_HEAD 64
#endif

/* Offsets inside a generated frame (IPv4 without options). */
#define BENCH_OFF_IP 14
#define BENCH_OFF_L4 34

#endif /* NOVAEDGE_BENCH_CONSTS_H */
