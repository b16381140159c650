// Package decap loads and attaches the DSR decapsulation program
// (bpf/decap.bpf.c) that backends run on their NIC.
//
// NovaEdge's XDP fast path forwards L4 flows to a backend in DSR mode by
// encapsulating the client's packet, addressed to the VIP, towards the
// backend's own address: IPv4 or IPv6 in IPv4 or IPv6 (IPIP, ip6ip6 and the
// two mixed forms), or GUE variant 1 (the IP packet directly in UDP to a
// configured port, as draft-ietf-intarea-gue defines it). The backend holds
// the VIP on its loopback. This package's XDP program removes the outer
// headers, so the backend's stack receives the client's packet as if it had
// been routed there and replies straight to the client, without the ipip,
// ip6_tunnel or fou drivers that many kernels lack.
//
// Everything else passes untouched, as do IPv4 fragments (never looked into)
// and, when an allow-list of local addresses is set, encapsulations to other
// outer destinations. Encapsulated packets whose headers are truncated or
// inconsistent are dropped. Each packet is counted once, per CPU; Stats sums
// the counters.
//
// The GUE port and the allow-list live in maps (decap_config, decap_addrs),
// so SetGUEPort and SetLocalAddrs change them without reloading or
// reattaching the program.
//
// Attachments are BPF links owned by the Decap: they end with Detach, Close
// or the process. Nothing is pinned.
package decap
