// Command xdpbench measures forwarded packets per second through a node
// network namespace, side by side in one run: a trivial XDP_TX program (the
// machine's ceiling), the least a NAT load balancer does in XDP, the kernel
// with an nftables DNAT rule, and the NovaEdge XDP fast path once it is
// wired in (perf/xdpbench/bench). Traffic comes from BPF_PROG_TEST_RUN in
// live-frame mode on a veth; a sink XDP program on the same veth counts
// what comes back. It writes xdp-<UTC stamp>.md and .json to -out.
//
// Run by hack/bench.sh (make bench); needs root. It creates its own
// namespaces (xb-<pid>-gen, xb-<pid>-node) and removes them at exit, also on
// SIGINT/SIGTERM; namespaces left behind by a killed run are removed at the
// next start.
package main
