// Package fastpath loads NovaEdge's XDP fast path (bpf/fastpath.bpf.c,
// compiled into gen/bpf/fastpath) and keeps its maps in step with the
// compiled snapshot.
//
// The data flows one way: the snapshot's plan entries marked FAST become
// Tables (VIP entries, backends, one Maglev table per VIP, built by
// fastpath/maglev), and Apply writes Tables into the maps in an order that
// never shows the program half a configuration: new backends first, then
// the new Maglev tables swapped in whole through the map-in-map, then the
// VIP entries, and only then the removal of what is gone. A backend ID is
// not reused while conntrack entries may still name it.
//
// The program itself never edits VIPs, backends or tables: health is
// decided once (by the controller, or the standalone agent) and arrives in
// the snapshot, so every node holds byte-identical tables and a flow that
// ECMP moves to another node reaches the same backend there.
//
// Sub-packages: maglev builds the tables, attach puts the program on
// interfaces and pins the links, flowhash is the Go twin of the program's
// flow hash.
package fastpath
