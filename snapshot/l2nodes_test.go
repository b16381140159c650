package snapshot

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/novaedge/novaedge/api/v1alpha1"
)

// TestStaticL2Nodes: in standalone mode the novaedge.io/l2-nodes
// annotation names an L2ARP VIP's active node and ordered standbys, the
// same for every node that reads the files; a controller ignores it.
func TestStaticL2Nodes(t *testing.T) {
	nodes := []corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.10"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.11"}}}},
	}
	vip := func(mode v1alpha1.VIPMode, annotation string) v1alpha1.ProxyVIP {
		v := v1alpha1.ProxyVIP{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: v1alpha1.ProxyVIPSpec{Address: "10.200.0.5", Mode: mode}}
		if mode == v1alpha1.VIPModeBGP {
			v.Spec.BGPConfig = &v1alpha1.BGPConfig{LocalAS: 65100, Peers: []v1alpha1.BGPPeer{{Address: "192.0.2.1", AS: 65000}}}
		}
		if annotation != "-" {
			v.Annotations = map[string]string{AnnotationL2Nodes: annotation}
		}
		return v
	}
	tests := []struct {
		name      string
		self      string
		vip       v1alpha1.ProxyVIP
		decisions *Decisions
		// served: the node part has the VIP with this role, active and
		// standbys ("" for none).
		served    bool
		role      string
		active    string
		standbys  []string
		addresses map[string]string
		diag      string // substring of a diagnostic; empty: none
		wantError bool
	}{
		{name: "no annotation: this node alone", self: "node-a", vip: vip(v1alpha1.VIPModeL2ARP, "-"),
			served: true, role: "VIP_ROLE_ACTIVE", active: "node-a", addresses: map[string]string{"node-a": "192.0.2.10"}},
		{name: "active", self: "node-a", vip: vip(v1alpha1.VIPModeL2ARP, "node-a,node-b"),
			served: true, role: "VIP_ROLE_ACTIVE", active: "node-a", standbys: []string{"node-b"},
			addresses: map[string]string{"node-a": "192.0.2.10", "node-b": "192.0.2.11"}},
		{name: "standby, spaces allowed", self: "node-b", vip: vip(v1alpha1.VIPModeL2ARP, " node-a , node-b "),
			served: true, role: "VIP_ROLE_STANDBY", active: "node-a", standbys: []string{"node-b"},
			addresses: map[string]string{"node-a": "192.0.2.10", "node-b": "192.0.2.11"}},
		{name: "node not named", self: "node-c", vip: vip(v1alpha1.VIPModeL2ARP, "node-a,node-b"),
			diag: `does not name node "node-c"`},
		{name: "empty entry", self: "node-a", vip: vip(v1alpha1.VIPModeL2ARP, "node-a,,node-b"),
			diag: "entry 1 has no node name", wantError: true},
		{name: "addresses in the annotation win over Node objects", self: "node-b", vip: vip(v1alpha1.VIPModeL2ARP, "node-a=10.9.0.1, node-b = 10.9.0.2,node-c"),
			served: true, role: "VIP_ROLE_STANDBY", active: "node-a", standbys: []string{"node-b", "node-c"},
			addresses: map[string]string{"node-a": "10.9.0.1", "node-b": "10.9.0.2"}},
		{name: "bad address", self: "node-a", vip: vip(v1alpha1.VIPModeL2ARP, "node-a=10.9.0.300,node-b"),
			diag: `node node-a: "10.9.0.300" is not a unicast IP address`, wantError: true},
		{name: "node twice", self: "node-a", vip: vip(v1alpha1.VIPModeL2ARP, "node-a,node-b,node-a"),
			diag: `node "node-a" is named twice`, wantError: true},
		{name: "not L2ARP: ignored", self: "node-a", vip: vip(v1alpha1.VIPModeBGP, "node-b"),
			served: true, role: "VIP_ROLE_ANNOUNCE", diag: "only L2ARP VIPs"},
		{name: "controller: ignored", self: "node-a", vip: vip(v1alpha1.VIPModeL2ARP, "node-b,node-a"),
			decisions: &Decisions{Assignments: map[string]Assignment{"web": {Active: "node-a", Standbys: []string{"node-b"}}}},
			served:    true, role: "VIP_ROLE_ACTIVE", active: "node-a", standbys: []string{"node-b"},
			addresses: map[string]string{"node-a": "192.0.2.10", "node-b": "192.0.2.11"}, diag: "the controller assigns the nodes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := &Input{VIPs: []v1alpha1.ProxyVIP{tc.vip}, Nodes: nodes, Decisions: tc.decisions}
			if tc.decisions != nil {
				tc.decisions.Addresses = map[string][]netip.Addr{"web": {netip.MustParseAddr("10.200.0.5")}}
			}
			snap, diags := Build(in, Options{Node: Node{Name: tc.self}})
			var msgs []string
			for _, d := range diags {
				msgs = append(msgs, d.String())
			}
			all := strings.Join(msgs, "\n")
			switch {
			case tc.diag == "" && len(diags) > 0:
				t.Errorf("diagnostics:\n%s", all)
			case tc.diag != "" && !strings.Contains(all, tc.diag):
				t.Errorf("diagnostics:\n%s\nwant one with %q", all, tc.diag)
			}
			if diags.HasErrors() != tc.wantError {
				t.Errorf("errors: %v, want %v:\n%s", diags.HasErrors(), tc.wantError, all)
			}
			vips := snap.GetNode().GetVips()
			if !tc.served {
				if len(vips) != 0 {
					t.Fatalf("node part has %v, want the VIP not served here", vips)
				}
				return
			}
			if len(vips) != 1 {
				t.Fatalf("node part: %v, want the VIP", vips)
			}
			v := vips[0]
			if v.GetRole().String() != tc.role || v.GetActiveNode() != tc.active || !slices.Equal(v.GetStandbyNodes(), tc.standbys) {
				t.Errorf("assignment: role %s, active %q, standbys %v; want %s, %q, %v", v.GetRole(), v.GetActiveNode(), v.GetStandbyNodes(), tc.role, tc.active, tc.standbys)
			}
			if got := v.GetNodeAddresses(); !maps.Equal(got, tc.addresses) {
				t.Errorf("node addresses %v, want %v", got, tc.addresses)
			}
		})
	}
}
