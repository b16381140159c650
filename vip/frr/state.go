package frr

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Neighbor is one OSPF neighbour, as ospfd sees it.
type Neighbor struct {
	// RouterID of the neighbour and Address of its interface.
	RouterID, Address netip.Addr
	// Interface is this node's interface towards it.
	Interface string
	// State is the adjacency state: Full, 2-Way, ExStart, Exchange,
	// Loading, Init, Down, Attempt.
	State string
	// Role is the neighbour's role on the link: DR, Backup, DROther, or
	// empty on point-to-point links.
	Role string
	// DeadTime is how long until the neighbour is declared down without
	// another Hello.
	DeadTime time.Duration
}

// Full reports whether the adjacency is complete.
func (n Neighbor) Full() bool { return n.State == "Full" }

// Route is a VIP host route in this node's router LSA.
type Route struct {
	VIP    string
	Prefix netip.Prefix
	Area   string
	Cost   uint32
}

// State is what the driver knows of OSPF on this node.
type State struct {
	// RouterID is the router ID ospfd uses.
	RouterID  string
	Neighbors []Neighbor
	// Routes are the desired VIPs found in this node's router LSAs.
	Routes []Route
	// Hellos are mismatches seen in neighbours' packets (CheckHellos).
	Hellos []HelloProblem
	// Problems are desired VIPs not advertised and uplinks without a
	// Full adjacency, each naming the VIP or interface.
	Problems []error
	// LastError is the error of the last reconcile, nil when it applied
	// everything; LastReconcile is when it ran.
	LastError     error
	LastReconcile time.Time
	// Reapplied counts the lines written again because FRR had lost them
	// (e.g. after ospfd restarted).
	Reapplied int
}

// Err joins the last reconcile's error, the Hello mismatches and the
// problems: nil when OSPF announces everything desired.
func (s State) Err() error {
	errs := []error{s.LastError}
	for _, h := range s.Hellos {
		errs = append(errs, h.Err)
	}
	return errors.Join(append(errs, s.Problems...)...)
}

// FRR's JSON, the fields read.
type (
	frrNeighbors struct {
		Neighbors map[string][]struct {
			State    string `json:"state"`
			DeadTime int64  `json:"deadTimeMsecs"`
			Address  string `json:"ifaceAddress"`
			Iface    string `json:"ifaceName"`
		} `json:"neighbors"`
	}
	frrRouterLSAs struct {
		RouterID string `json:"routerId"`
		Areas    map[string]map[string]struct {
			Links map[string]struct {
				Type    string `json:"linkType"`
				Network string `json:"networkAddress"`
				Mask    string `json:"networkMask"`
				Metric  uint32 `json:"tos0Metric"`
			} `json:"routerLinks"`
		} `json:"Router Link States"`
	}
)

// State reads the state of OSPF from FRR now.
func (d *Driver) State(ctx context.Context) (State, error) {
	d.mu.Lock()
	des := d.desired
	s := State{LastError: d.lastErr, LastReconcile: d.lastAt, Reapplied: d.reapplied}
	d.mu.Unlock()
	if !d.hasSocket("ospfd") {
		if len(des.VIPs) > 0 || len(des.Uplinks) > 0 {
			s.Problems = append(s.Problems, fmt.Errorf("FRR's ospfd is not running (no ospfd.vty in %s)", d.opts.SocketDir))
		}
		return s, nil
	}
	var nb frrNeighbors
	if err := d.showJSON(ctx, "show ip ospf neighbor json", &nb); err != nil {
		return s, err
	}
	for id, list := range nb.Neighbors {
		rid, _ := netip.ParseAddr(id)
		for _, n := range list {
			st, role, _ := strings.Cut(n.State, "/")
			ifname, _, _ := strings.Cut(n.Iface, ":")
			addr, _ := netip.ParseAddr(n.Address)
			s.Neighbors = append(s.Neighbors, Neighbor{RouterID: rid, Address: addr, Interface: ifname,
				State: st, Role: role, DeadTime: time.Duration(n.DeadTime) * time.Millisecond})
		}
	}
	slices.SortFunc(s.Neighbors, func(a, b Neighbor) int {
		return cmp2(strings.Compare(a.Interface, b.Interface), a.Address.Compare(b.Address))
	})
	var lsa frrRouterLSAs
	if err := d.showJSON(ctx, "show ip ospf database router self-originate json", &lsa); err != nil {
		return s, err
	}
	s.RouterID = lsa.RouterID
	adv := map[netip.Addr]Route{}
	for area, byID := range lsa.Areas {
		for _, r := range byID {
			for _, l := range r.Links {
				a, err := netip.ParseAddr(l.Network)
				if err != nil || l.Mask != "255.255.255.255" || !strings.Contains(l.Type, "Stub") {
					continue
				}
				adv[a] = Route{Prefix: netip.PrefixFrom(a, 32), Area: area, Cost: l.Metric}
			}
		}
	}
	for _, v := range des.VIPs {
		r, ok := adv[v.Address]
		if !ok {
			s.Problems = append(s.Problems, fmt.Errorf("vip %s: %s is not in this node's router LSA: is the address bound on %s, and ospfd running?", v.Name, v.Address, d.opts.Loopback))
			continue
		}
		r.VIP = v.Name
		s.Routes = append(s.Routes, r)
	}
	hellos, herrs := d.hellos.problems()
	s.Hellos = hellos
	s.Problems = append(s.Problems, herrs...)
	for _, u := range des.Uplinks {
		if slices.ContainsFunc(s.Neighbors, func(n Neighbor) bool { return n.Interface == u.Interface && n.Full() }) {
			continue
		}
		if slices.ContainsFunc(hellos, func(h HelloProblem) bool { return h.Interface == u.Interface }) {
			continue // the mismatch says why
		}
		s.Problems = append(s.Problems, fmt.Errorf("uplink %s: no neighbour in state Full", u.Interface))
	}
	return s, nil
}

func cmp2(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}
