package snapshot

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/novaedge/novaedge/api/v1alpha1"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// buildNode assembles the per-node part: the VIPs this node serves and how.
func (b *builder) buildNode() {
	b.node = &pb.NodeConfig{NodeName: b.opts.Node.Name}
	var bgpOwner *vipEntry // the first BGP VIP on this node: sets the speaker's AS
	peers := map[string]*pb.BGPPeer{}
	peerOwner := map[string]string{}
	for _, e := range b.vips {
		if !e.accepted {
			continue
		}
		asg, serves := b.assignment(e)
		if !serves {
			continue
		}
		a := &pb.VIPAssignment{
			Vip: e.obj.Name, Mode: e.pb.Mode, Addresses: slices.Clone(e.pb.Addresses),
			ActiveNode: asg.Active, StandbyNodes: slices.Clone(asg.Standbys),
			Interfaces: slices.Clone(e.obj.Spec.Interfaces),
		}
		name := b.opts.Node.Name
		switch e.obj.Spec.Mode {
		case v1alpha1.VIPModeLocal:
			a.Role = pb.VIPRole_VIP_ROLE_ACTIVE
			if len(a.Interfaces) == 0 {
				a.Interfaces = []string{"lo"}
			}
		case v1alpha1.VIPModeL2ARP:
			a.Role = pb.VIPRole_VIP_ROLE_STANDBY
			if asg.Active == name {
				a.Role = pb.VIPRole_VIP_ROLE_ACTIVE
			}
			a.NodeAddresses = b.nodeAddresses(append([]string{asg.Active}, asg.Standbys...))
			if v, ok := e.obj.Annotations[AnnotationL2Nodes]; ok && b.in.Decisions == nil {
				// Checked by staticL2Nodes.
				if _, addrs, err := parseL2Nodes(v); err == nil && len(addrs) > 0 {
					if a.NodeAddresses == nil {
						a.NodeAddresses = map[string]string{}
					}
					maps.Copy(a.NodeAddresses, addrs)
				}
			}
		case v1alpha1.VIPModeBGP, v1alpha1.VIPModeOSPF:
			a.Role = pb.VIPRole_VIP_ROLE_ANNOUNCE
		}
		if bfd := e.obj.Spec.BFD; bfd != nil && bfd.Enabled && e.obj.Spec.Mode != v1alpha1.VIPModeLocal {
			a.Bfd = &pb.BFD{
				Enabled:          true,
				DetectMultiplier: orU32(bfd.DetectMultiplier, 3),
				DesiredMinTxMs:   ms(bfd.DesiredMinTxInterval, 300*time.Millisecond),
				RequiredMinRxMs:  ms(bfd.RequiredMinRxInterval, 300*time.Millisecond),
				EchoMode:         bfd.EchoMode,
			}
		}
		if e.obj.Spec.Mode == v1alpha1.VIPModeBGP && e.obj.Spec.BGPConfig != nil {
			bgp, ok := b.bgpAnnouncement(e, len(asg.Announcing))
			if !ok {
				continue
			}
			// One speaker per node: every BGP VIP on it must agree on the
			// local AS and on each peer.
			if bgpOwner != nil && bgpOwner.obj.Spec.BGPConfig.LocalAS != e.obj.Spec.BGPConfig.LocalAS {
				b.errorf(e.ref, "spec.bgpConfig.localAS", "node %s already speaks BGP as AS %d for ProxyVIP %s; one node has one local AS", name, bgpOwner.obj.Spec.BGPConfig.LocalAS, bgpOwner.obj.Name)
				continue
			}
			conflict := false
			for i, p := range bgp.Peers {
				k := p.Address
				if q := peers[k]; q != nil && (q.As != p.As || q.Port != p.Port || q.Password != p.Password || q.EbgpMultihop != p.EbgpMultihop) {
					b.errorf(e.ref, fmt.Sprintf("spec.bgpConfig.peers[%d]", i), "peer %s is configured differently by ProxyVIP %s (AS, port, password or multihop); a node has one session per peer", k, peerOwner[k])
					conflict = true
				}
			}
			if conflict {
				continue
			}
			if bgpOwner == nil {
				bgpOwner = e
			}
			for _, p := range bgp.Peers {
				if peers[p.Address] == nil {
					peers[p.Address], peerOwner[p.Address] = p, e.obj.Name
				}
			}
			a.Bgp = bgp
		}
		if e.obj.Spec.Mode == v1alpha1.VIPModeOSPF && e.obj.Spec.OSPFConfig != nil {
			ospf, ok := b.ospfAnnouncement(e, len(asg.Announcing))
			if !ok {
				continue
			}
			a.Ospf = ospf
		}
		b.node.Vips = append(b.node.Vips, a)
	}
	slices.SortFunc(b.node.Vips, func(x, y *pb.VIPAssignment) int { return cmp.Compare(x.Vip, y.Vip) })
}

// AnnotationL2Nodes on an L2ARP ProxyVIP gives, in standalone mode only,
// the static active node and ordered standbys of the VIP, comma-separated
// ("node-a,node-b,node-c": node-a is active, node-b the first standby).
// Standalone agents have no controller to choose them, and failover needs
// every node of the VIP to agree on the order; each agent reads the same
// files with its own --node-name. An entry may carry the node's address,
// where the heartbeats go ("node-a=192.0.2.10"), because standalone files
// usually have no Node objects (the InternalIP of a Node object in the
// input is used for entries without one). A controller ignores the
// annotation (it decides, and warns).
const AnnotationL2Nodes = "novaedge.io/l2-nodes"

// assignment returns who serves e, and whether this node does. Standalone
// (no decisions): this node serves every VIP whose nodeSelector matches its
// labels, alone, unless an L2ARP VIP names its nodes (AnnotationL2Nodes).
func (b *builder) assignment(e *vipEntry) (Assignment, bool) {
	name := b.opts.Node.Name
	static, hasStatic := e.obj.Annotations[AnnotationL2Nodes]
	if d := b.in.Decisions; d != nil {
		if hasStatic {
			b.warnf(e.ref, annotationField(AnnotationL2Nodes), "ignored: the controller assigns the nodes of a VIP; the annotation is for standalone agents")
		}
		asg := d.Assignments[e.obj.Name]
		return asg, asg.Active == name || slices.Contains(asg.Standbys, name) || slices.Contains(asg.Announcing, name)
	}
	if hasStatic {
		return b.staticL2Nodes(e, static)
	}
	return b.assignmentIgnoringStatic(e)
}

// staticL2Nodes is the assignment AnnotationL2Nodes gives e in standalone
// mode. The nodeSelector is not consulted: the list names the nodes.
func (b *builder) staticL2Nodes(e *vipEntry, v string) (Assignment, bool) {
	field := annotationField(AnnotationL2Nodes)
	if e.obj.Spec.Mode != v1alpha1.VIPModeL2ARP {
		b.warnf(e.ref, field, "ignored: only L2ARP VIPs have an active node and standbys (mode %s)", e.obj.Spec.Mode)
		return b.assignmentIgnoringStatic(e)
	}
	nodes, _, err := parseL2Nodes(v)
	if err != nil {
		b.errorf(e.ref, field, "%v", err)
		return Assignment{}, false
	}
	asg := Assignment{Active: nodes[0], Standbys: nodes[1:]}
	if !slices.Contains(nodes, b.opts.Node.Name) {
		b.warnf(e.ref, field, "does not name node %q; the VIP is not served here", b.opts.Node.Name)
		return asg, false
	}
	return asg, true
}

// parseL2Nodes parses AnnotationL2Nodes: node names in order, and the
// addresses some entries give.
func parseL2Nodes(v string) ([]string, map[string]string, error) {
	var nodes []string
	var addrs map[string]string
	for i, entry := range strings.Split(v, ",") {
		n, a, hasAddr := strings.Cut(strings.TrimSpace(entry), "=")
		n = strings.TrimSpace(n)
		switch {
		case n == "":
			return nil, nil, fmt.Errorf("entry %d has no node name; want node[=address] entries separated by commas, the active node first", i)
		case slices.Contains(nodes, n):
			return nil, nil, fmt.Errorf("node %q is named twice", n)
		}
		if hasAddr {
			ip, err := netip.ParseAddr(strings.TrimSpace(a))
			if err != nil || ip.Zone() != "" || !ip.IsGlobalUnicast() {
				return nil, nil, fmt.Errorf("node %s: %q is not a unicast IP address", n, strings.TrimSpace(a))
			}
			if addrs == nil {
				addrs = map[string]string{}
			}
			addrs[n] = ip.Unmap().String()
		}
		nodes = append(nodes, n)
	}
	return nodes, addrs, nil
}

// assignmentIgnoringStatic is the standalone assignment without
// AnnotationL2Nodes.
func (b *builder) assignmentIgnoringStatic(e *vipEntry) (Assignment, bool) {
	name := b.opts.Node.Name
	if sel := e.obj.Spec.NodeSelector; sel != nil {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			b.errorf(e.ref, "spec.nodeSelector", "invalid selector: %v", err)
			return Assignment{}, false
		}
		if !s.Matches(labels.Set(b.opts.Node.Labels)) {
			b.warnf(e.ref, "spec.nodeSelector", "does not match the labels of node %q (%v); the VIP is not served here", name, labels.Set(b.opts.Node.Labels))
			return Assignment{}, false
		}
	}
	asg := Assignment{Active: name}
	if m := e.obj.Spec.Mode; m == v1alpha1.VIPModeBGP || m == v1alpha1.VIPModeOSPF {
		asg = Assignment{Announcing: []string{name}}
	}
	return asg, true
}

// routerID applies the rule for VIP-level router IDs: every announcing node
// needs its own, so a VIP's routerID is used only when one node announces.
func (b *builder) routerID(e *vipEntry, field, id string, announcers int) string {
	if id == "" {
		return ""
	}
	if announcers > 1 {
		b.warnf(e.ref, field, "ignored: %d nodes announce this VIP and each needs its own router ID; every node uses its own address (or the agent's --router-id)", announcers)
		return ""
	}
	return id
}

func (b *builder) bgpAnnouncement(e *vipEntry, announcers int) (*pb.BGPAnnouncement, bool) {
	c := e.obj.Spec.BGPConfig
	out := &pb.BGPAnnouncement{
		LocalAs:          uint32(c.LocalAS),
		RouterId:         b.routerID(e, "spec.bgpConfig.routerID", c.RouterID, announcers),
		Communities:      slices.Sorted(slices.Values(c.Communities)),
		LargeCommunities: slices.Sorted(slices.Values(c.LargeCommunities)),
	}
	if c.LocalPreference != nil {
		out.HasLocalPreference, out.LocalPreference = true, uint32(*c.LocalPreference)
	}
	if c.MED != nil {
		out.HasMed, out.Med = true, uint32(*c.MED)
	}
	ok := true
	for i, p := range c.Peers {
		f := fmt.Sprintf("spec.bgpConfig.peers[%d]", i)
		if _, err := netip.ParseAddr(p.Address); err != nil {
			b.errorf(e.ref, f+".address", "invalid IP address %q", p.Address)
			ok = false
			continue
		}
		hold := ms(p.HoldTime, 90*time.Second)
		peer := &pb.BGPPeer{
			Address: p.Address, As: uint32(p.AS), Port: orU32(p.Port, 179),
			EbgpMultihop:    uint32(max(p.EBGPMultihop, 0)),
			HoldTimeMs:      hold,
			KeepaliveTimeMs: ms(p.KeepaliveTime, time.Duration(hold/3)*time.Millisecond),
			GracefulRestart: p.GracefulRestart == nil || *p.GracefulRestart,
		}
		if peer.KeepaliveTimeMs > peer.HoldTimeMs {
			b.errorf(e.ref, f+".keepaliveTime", "must not exceed holdTime")
			ok = false
		}
		if sr := p.PasswordSecretRef; sr != nil {
			v, found, fatal := b.secretValue(e.ref, f+".passwordSecretRef", cmp.Or(sr.Namespace, b.systemNamespace()), sr.Name, cmp.Or(sr.Key, "password"))
			if fatal {
				ok = false
			}
			if found {
				peer.Password = string(v)
			}
		}
		out.Peers = append(out.Peers, peer)
	}
	slices.SortFunc(out.Peers, func(x, y *pb.BGPPeer) int { return cmp.Compare(x.Address, y.Address) })
	return out, ok
}

func (b *builder) ospfAnnouncement(e *vipEntry, announcers int) (*pb.OSPFAnnouncement, bool) {
	c := e.obj.Spec.OSPFConfig
	hello := orU32(c.HelloInterval, 10)
	out := &pb.OSPFAnnouncement{
		RouterId:        b.routerID(e, "spec.ospfConfig.routerID", c.RouterID, announcers),
		Area:            "0.0.0.0",
		Cost:            orU32(c.Cost, 10),
		HelloIntervalS:  hello,
		DeadIntervalS:   orU32(c.DeadInterval, 4*hello),
		AuthType:        string(cmp.Or(c.AuthType, v1alpha1.OSPFAuthNone)),
		AuthKeyId:       orU32(c.AuthKeyID, 1),
		GracefulRestart: c.GracefulRestart,
	}
	if out.DeadIntervalS <= out.HelloIntervalS {
		b.errorf(e.ref, "spec.ospfConfig.deadInterval", "must be greater than helloInterval (%d)", hello)
		return nil, false
	}
	if a := c.AreaID; a != nil {
		area, err := dottedArea(a.String())
		if err != nil {
			b.errorf(e.ref, "spec.ospfConfig.areaID", "%v", err)
			return nil, false
		}
		out.Area = area
	}
	if out.AuthType == string(v1alpha1.OSPFAuthMD5) {
		switch {
		case c.AuthKeySecretRef != nil:
			sr := c.AuthKeySecretRef
			v, found, fatal := b.secretValue(e.ref, "spec.ospfConfig.authKeySecretRef", cmp.Or(sr.Namespace, b.systemNamespace()), sr.Name, cmp.Or(sr.Key, "key"))
			if fatal {
				return nil, false
			}
			out.AuthKey = string(v)
			if found && (len(v) == 0 || len(v) > 16) {
				b.errorf(e.ref, "spec.ospfConfig.authKeySecretRef", "OSPF md5 keys are 1-16 bytes, got %d", len(v))
				return nil, false
			}
		case c.AuthKey != "":
			out.AuthKey = c.AuthKey
		default:
			b.errorf(e.ref, "spec.ospfConfig.authKeySecretRef", "authType md5 needs authKeySecretRef (or the deprecated authKey)")
			return nil, false
		}
	}
	return out, true
}

// dottedArea turns "0", "10" or "0.0.0.10" into dotted form.
func dottedArea(s string) (string, error) {
	if a, err := netip.ParseAddr(s); err == nil && a.Is4() {
		return a.String(), nil
	}
	var n uint64
	if _, err := fmt.Sscanf(s, "%d", &n); err != nil || fmt.Sprint(n) != s || n > 0xffffffff {
		return "", fmt.Errorf("invalid area %q: use a number 0-4294967295 or dotted form like 0.0.0.0", s)
	}
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}).String(), nil
}

// nodeAddresses maps each named node that has one to its InternalIP (IPv4
// preferred), for the heartbeats between an L2 VIP's active and standby
// nodes. Nil when none is known (standalone files without Node objects).
func (b *builder) nodeAddresses(names []string) map[string]string {
	var out map[string]string
	for i := range b.in.Nodes {
		n := &b.in.Nodes[i]
		if n.Name == "" || !slices.Contains(names, n.Name) {
			continue
		}
		if ip := internalIP(n); ip.IsValid() {
			if out == nil {
				out = map[string]string{}
			}
			out[n.Name] = ip.String()
		}
	}
	return out
}

// internalIP is n's first IPv4 InternalIP, else its first IPv6 one.
func internalIP(n *corev1.Node) netip.Addr {
	var v6 netip.Addr
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		ip, err := netip.ParseAddr(a.Address)
		switch {
		case err != nil:
		case ip.Is4():
			return ip
		case !v6.IsValid():
			v6 = ip
		}
	}
	return v6
}
