// Package datapath runs the XDP fast path on a node for the agent: it loads
// the program with its maps pinned under /sys/fs/bpf/novaedge/<layout>/,
// adopts what an earlier agent left there (so flows keep their backends
// across restarts and upgrades), attaches the program to the interfaces
// through pinned links (fastpath/attach), keeps neighbour entries for the
// next hops of backends (bpf_fib_lookup needs them to forward in XDP),
// reserves the SNAT port range from the host's ephemeral ports, and applies
// every snapshot through fastpath.Manager as an agent Applier.
//
// Closing a Datapath (agent shutdown) leaves the program attached and the
// maps pinned: traffic keeps flowing while no agent runs. Only Uninstall
// (novaedgectl fastpath uninstall) removes it.
package datapath
