package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// planLines prints plan as a table and returns its rows (without the
// header), each with its columns joined by one space.
func planLines(t *testing.T, plan []*pb.PlanEntry) []string {
	t.Helper()
	var table bytes.Buffer
	if err := WritePlan(&table, plan); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(table.String()), "\n")[1:] {
		out = append(out, strings.Join(strings.Fields(line), " "))
	}
	return out
}

// The plan shows how each FAST entry is forwarded, in the table (after the
// reasons) and in JSON (with the names spec.forwarding uses); SLOW entries
// have no forwarding.
func TestPlanForwarding(t *testing.T) {
	entry := func(port uint32, path pb.DataPath, f *pb.Forwarding) *pb.PlanEntry {
		return &pb.PlanEntry{Vip: "v", Address: "10.0.0.1", Port: port, Protocol: pb.L4Protocol_L4_PROTOCOL_TCP, Path: path, Listener: "ns/gw/l", Reasons: []string{"why"}, Forwarding: f}
	}
	fast := pb.DataPath_DATA_PATH_FAST
	nat, dsr := pb.ForwardingMode_FORWARDING_MODE_NAT, pb.ForwardingMode_FORWARDING_MODE_DSR
	plan := []*pb.PlanEntry{
		entry(1, fast, &pb.Forwarding{Mode: nat}),
		entry(2, fast, &pb.Forwarding{Mode: nat, PreserveClientIp: true}),
		entry(3, fast, &pb.Forwarding{Mode: dsr, Encapsulation: pb.Encapsulation_ENCAPSULATION_IPIP}),
		entry(4, fast, &pb.Forwarding{Mode: dsr, Encapsulation: pb.Encapsulation_ENCAPSULATION_GUE, GuePort: 6080}),
		entry(5, fast, &pb.Forwarding{Mode: dsr, Encapsulation: pb.Encapsulation_ENCAPSULATION_L2}),
		entry(6, pb.DataPath_DATA_PATH_SLOW, nil),
	}

	got := planLines(t, plan)
	want := []string{
		"v 10.0.0.1:1/tcp FAST ns/gw/l why; forwarding: NAT with SNAT to the node's address",
		"v 10.0.0.1:2/tcp FAST ns/gw/l why; forwarding: NAT keeping the client address (DNAT only)",
		"v 10.0.0.1:3/tcp FAST ns/gw/l why; forwarding: DSR over IPIP",
		"v 10.0.0.1:4/tcp FAST ns/gw/l why; forwarding: DSR over GUE (UDP port 6080)",
		"v 10.0.0.1:5/tcp FAST ns/gw/l why; forwarding: DSR by MAC rewrite (L2)",
		"v 10.0.0.1:6/tcp SLOW ns/gw/l why",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
	if plan[0].Reasons[0] != "why" || len(plan[0].Reasons) != 1 {
		t.Errorf("printing changed the snapshot's reasons: %q", plan[0].Reasons)
	}

	raw, err := json.Marshal(planRows(plan))
	if err != nil {
		t.Fatal(err)
	}
	var rows []struct {
		Forwarding json.RawMessage `json:"forwarding"`
	}
	if err := json.Unmarshal(raw, &rows); err != nil {
		t.Fatal(err)
	}
	var gotJSON []string
	for _, r := range rows {
		gotJSON = append(gotJSON, string(r.Forwarding))
	}
	wantJSON := []string{
		`{"mode":"NAT"}`,
		`{"mode":"NAT","preserveClientIP":true}`,
		`{"mode":"DSR","encapsulation":"IPIP"}`,
		`{"mode":"DSR","encapsulation":"GUE","guePort":6080}`,
		`{"mode":"DSR","encapsulation":"L2"}`,
		``,
	}
	if diff := cmp.Diff(wantJSON, gotJSON); diff != "" {
		t.Errorf("JSON forwarding (-want +got):\n%s", diff)
	}
}

// The plan says when a FAST entry's Maglev table comes from the leader's
// lineage or from this node's endpoints alone.
func TestPlanMaglev(t *testing.T) {
	fast := func(port uint32) *pb.PlanEntry {
		return &pb.PlanEntry{Vip: "v", Address: "10.0.0.1", Port: port, Protocol: pb.L4Protocol_L4_PROTOCOL_TCP, Path: pb.DataPath_DATA_PATH_FAST, Listener: "l", Reasons: []string{"why"}}
	}
	lin, local := fast(1), fast(2)
	lin.Lineage = &pb.MaglevLineage{Size: 251, Backends: []string{"10.1.0.1:80", "10.1.0.2:80"}}
	local.NodeLocal = true
	plan := []*pb.PlanEntry{lin, local, fast(3)}
	got := planLines(t, plan)
	want := []string{
		"v 10.0.0.1:1/tcp FAST l why; maglev table: from the leader's lineage (2 backends)",
		"v 10.0.0.1:2/tcp FAST l why; maglev table: from this node's endpoints only",
		"v 10.0.0.1:3/tcp FAST l why",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
	raw, err := json.Marshal(planRows(plan))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"maglev":{"lineageBackends":2}`, `"maglev":{"nodeLocal":true}`, `"maglev":{}`} {
		if !strings.Contains(string(raw), s) {
			t.Errorf("JSON lacks %s: %s", s, raw)
		}
	}
}
