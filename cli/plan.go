package cli

import (
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// planRow is one entry of the plan as novaedgectl shows it.
type planRow struct {
	VIP       string   `json:"vip"`
	Address   string   `json:"address"`
	Port      uint32   `json:"port"`
	Protocol  string   `json:"protocol"`
	Path      string   `json:"path"`
	Listener  string   `json:"listener"`
	Reasons   []string `json:"reasons"`
	Endpoints []string `json:"endpoints,omitempty"`
	// Forwarding is how XDP hands FAST flows to their backends; nil for SLOW.
	Forwarding *planForwarding `json:"forwarding,omitempty"`
	// Maglev says what a FAST entry's table is built from; nil for SLOW.
	Maglev *planMaglev `json:"maglev,omitempty"`
}

// planMaglev is what a FAST entry's Maglev table is built from.
type planMaglev struct {
	// LineageBackends, when not zero, is how many backends the leader's
	// lineage names: the table is built from it, the same on every node.
	LineageBackends int `json:"lineageBackends,omitempty"`
	// NodeLocal: the endpoints are this node's only (externalTrafficPolicy
	// Local), so the table is this node's own.
	NodeLocal bool `json:"nodeLocal,omitempty"`
}

// String says in a few words what the table is built from.
func (m *planMaglev) String() string {
	switch {
	case m.LineageBackends > 0:
		return fmt.Sprintf("from the leader's lineage (%d backends)", m.LineageBackends)
	case m.NodeLocal:
		return "from this node's endpoints only"
	}
	return "from the endpoints"
}

// planForwarding is a PlanEntry's forwarding with the values users write in
// a ProxyVIP's spec.forwarding.
type planForwarding struct {
	// Mode is NAT or DSR.
	Mode string `json:"mode"`
	// PreserveClientIP (NAT): only the destination is translated.
	PreserveClientIP bool `json:"preserveClientIP,omitempty"`
	// Encapsulation (DSR) is IPIP, GUE or L2.
	Encapsulation string `json:"encapsulation,omitempty"`
	// GUEPort (DSR over GUE) is the UDP port of the encapsulated packets.
	GUEPort uint32 `json:"guePort,omitempty"`
}

func newPlanForwarding(f *pb.Forwarding) *planForwarding {
	if f == nil {
		return nil
	}
	out := &planForwarding{
		Mode:             strings.TrimPrefix(f.GetMode().String(), "FORWARDING_MODE_"),
		PreserveClientIP: f.GetPreserveClientIp(),
		GUEPort:          f.GetGuePort(),
	}
	if e := f.GetEncapsulation(); e != pb.Encapsulation_ENCAPSULATION_UNSPECIFIED {
		out.Encapsulation = strings.TrimPrefix(e.String(), "ENCAPSULATION_")
	}
	return out
}

// String says in a few words what the fast path does with a flow.
func (f *planForwarding) String() string {
	switch {
	case f.Mode == "NAT" && f.PreserveClientIP:
		return "NAT keeping the client address (DNAT only)"
	case f.Mode == "NAT":
		return "NAT with SNAT to the node's address"
	case f.Encapsulation == "GUE":
		return fmt.Sprintf("DSR over GUE (UDP port %d)", f.GUEPort)
	case f.Encapsulation == "L2":
		return "DSR by MAC rewrite (L2)"
	case f.Encapsulation != "":
		return "DSR over " + f.Encapsulation
	default:
		return f.Mode
	}
}

// planRows converts the snapshot's plan, keeping its order (by address,
// port, protocol).
func planRows(plan []*pb.PlanEntry) []planRow {
	rows := make([]planRow, 0, len(plan))
	for _, e := range plan {
		r := planRow{
			VIP:      e.GetVip(),
			Address:  e.GetAddress(),
			Port:     e.GetPort(),
			Protocol: protocolName(e.GetProtocol()),
			Path:     pathName(e.GetPath()),
			Listener: e.GetListener(),
			Reasons:  e.GetReasons(),

			Forwarding: newPlanForwarding(e.GetForwarding()),
		}
		if r.Reasons == nil {
			r.Reasons = []string{}
		}
		if e.GetPath() == pb.DataPath_DATA_PATH_FAST {
			r.Maglev = &planMaglev{LineageBackends: len(e.GetLineage().GetBackends()), NodeLocal: e.GetNodeLocal()}
		}
		for _, ep := range e.GetEndpoints() {
			r.Endpoints = append(r.Endpoints, fmt.Sprintf("%s w=%d %s", hostPort(ep.GetAddress(), ep.GetPort()), ep.GetWeight(), endpointState(ep.GetState())))
		}
		rows = append(rows, r)
	}
	return rows
}

func protocolName(p pb.L4Protocol) string {
	switch p {
	case pb.L4Protocol_L4_PROTOCOL_TCP:
		return "tcp"
	case pb.L4Protocol_L4_PROTOCOL_UDP:
		return "udp"
	default:
		return "?"
	}
}

func pathName(p pb.DataPath) string {
	switch p {
	case pb.DataPath_DATA_PATH_FAST:
		return "FAST"
	case pb.DataPath_DATA_PATH_SLOW:
		return "SLOW"
	default:
		return "-"
	}
}

func endpointState(s pb.EndpointState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "ENDPOINT_STATE_"))
}

// hostPort formats address:port, bracketing IPv6 addresses.
func hostPort(addr string, port uint32) string {
	if a, err := netip.ParseAddr(addr); err == nil && a.Is6() {
		return "[" + addr + "]:" + strconv.FormatUint(uint64(port), 10)
	}
	return addr + ":" + strconv.FormatUint(uint64(port), 10)
}

// writePlanTable prints the plan: one line per VIP address:port/protocol,
// with the reasons for its path and, for FAST, how flows are forwarded (at
// the end of the line, so the columns stay those scripts already read).
func writePlanTable(w io.Writer, rows []planRow) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "plan: nothing is served (no listener has an address and a route)")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	p := &printer{w: tw}
	p.println("VIP\tADDRESS\tPATH\tLISTENER\tREASONS")
	for _, r := range rows {
		vip := r.VIP
		if vip == "" {
			vip = "-"
		}
		notes := r.Reasons
		if r.Forwarding != nil {
			notes = append(slices.Clip(notes), "forwarding: "+r.Forwarding.String())
		}
		if r.Maglev != nil && (r.Maglev.LineageBackends > 0 || r.Maglev.NodeLocal) {
			notes = append(slices.Clip(notes), "maglev table: "+r.Maglev.String())
		}
		p.printf("%s\t%s/%s\t%s\t%s\t%s\n", vip, hostPort(r.Address, r.Port), r.Protocol, r.Path, r.Listener, strings.Join(notes, "; "))
	}
	if p.err != nil {
		return p.err
	}
	return tw.Flush()
}

// WritePlan prints a snapshot's plan as `novaedgectl plan` does; the agent's
// --dry-run uses it.
func WritePlan(w io.Writer, plan []*pb.PlanEntry) error {
	return writePlanTable(w, planRows(plan))
}
