// Package attach puts an XDP program on network interfaces and keeps it there
// across agent restarts. It knows nothing about what the program does: any
// *ebpf.Program of type XDP will do.
//
// Resolve turns the names given with --interface into the devices XDP must
// run on (a VLAN's parent, a bond's slaves, the default route's interface when
// none are given). An Attacher attaches the program with BPF links, never the
// legacy netlink call, and pins each link at
//
//	<root>/<layout version>/links/<ifname>
//
// A pinned link keeps the program attached after every file descriptor is
// closed, so an agent that exits (SIGTERM, crash, upgrade) leaves the fast
// path running. The next agent calls Adopt, which swaps its program into the
// pinned links with BPF_LINK_UPDATE: the kernel replaces the program pointer
// atomically, so no packet ever sees the interface without a program. Only
// Detach and DetachAll take the program off an interface.
//
// Every function acts in the network namespace of the calling OS thread: the
// kernel resolves the ifindex of a BPF link in that namespace, and netlink
// sockets are opened there. Callers that switch namespaces must lock the
// goroutine to its thread.
package attach
