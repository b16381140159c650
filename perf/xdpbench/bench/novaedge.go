package bench

import (
	"context"
	"fmt"
	"os"

	"github.com/cilium/ebpf/link"

	"github.com/novaedge/novaedge/fastpath"
	"github.com/novaedge/novaedge/perf/xdpbench/topo"
)

func init() { novaEdge = novaEdgeSetup }

// novaEdgeSetup loads the NovaEdge fast path, configures the bench service
// for UDP and TCP with DNAT to the backend (NAT keeping the client address,
// like the nftables DNAT baseline: the generator's 65 536 flows to one
// backend would exhaust any SNAT port range) and attaches it in native mode.
func novaEdgeSetup(_ context.Context, nodeNS, ifname string) (func(), error) {
	objs, err := fastpath.Load(fastpath.LoadOptions{ConntrackSize: 1 << 18, NATSize: 1 << 18})
	if err != nil {
		return nil, err
	}
	m, err := fastpath.NewManager(objs, fastpath.ManagerOptions{})
	if err != nil {
		_ = objs.Close()
		return nil, err
	}
	be := []fastpath.Backend{{Addr: topo.Backend, Port: topo.Port, Weight: 1}}
	cfg := fastpath.Config{
		Node: fastpath.Node{V4: topo.NodeAddr},
		VIPs: []fastpath.VIP{
			{Name: "bench-tcp", Addr: topo.VIP, Port: topo.Port, Proto: fastpath.ProtoTCP, Forward: fastpath.ForwardNATKeepClient, Backends: be},
			{Name: "bench-udp", Addr: topo.VIP, Port: topo.Port, Proto: fastpath.ProtoUDP, Forward: fastpath.ForwardNATKeepClient, Backends: be},
		},
	}
	if _, err := m.Apply(cfg); err != nil {
		_ = objs.Close()
		return nil, fmt.Errorf("configure the fast path: %w", err)
	}
	l, err := topo.AttachXDP(nodeNS, ifname, objs.NovaedgeFastpath, link.XDPDriverMode)
	if err != nil {
		_ = objs.Close()
		return nil, err
	}
	return func() {
		// The program's own account of the run, so a report can be
		// checked against the path it claims to measure.
		if c, err := objs.Counters(); err == nil {
			fmt.Fprintf(os.Stderr, "novaedge counters: rx %d ct_hit %d ct_miss %d ct_created %d tx %d pass_not_vip %d pass_no_neigh %d drops(no_backend %d malformed %d)\n",
				c["rx"], c["ct_hit"], c["ct_miss"], c["ct_created"], c["tx"], c["pass_not_vip"], c["pass_no_neigh"], c["drop_no_backend"], c["drop_malformed"])
		}
		_ = l.Close()
		_ = objs.Close()
	}, nil
}
