// Package traffic drives the XDP benchmark's packets: the generator, which
// sends frames through BPF_PROG_TEST_RUN in live-frame mode
// (BPF_F_TEST_XDP_LIVE_FRAMES, so no kernel pktgen is needed), and the sink,
// an XDP program on the generator's veth that counts the frames the node
// under test sends back and drops them.
//
// The generator program rebuilds every frame from a template (live-frame
// pages come back after the node rewrote them) and, for a profile with
// many flows, gives each frame its own source port and address, with the
// checksums updated, so that connection tracking and load balancers do the
// work real traffic asks of them.
package traffic
