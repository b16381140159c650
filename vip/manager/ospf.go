package manager

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"time"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/vip/frr"
	"github.com/novaedge/novaedge/vip/local"
)

// Files in Options.StateDir for OSPF.
const (
	// OSPFStateFile records the FRR configuration lines the driver wrote,
	// so that a restarted agent still knows which lines are its own.
	OSPFStateFile = "ospf-frr.json"
	// OSPFAddressFile records the OSPF VIP addresses the manager bound on
	// lo, so that a restarted agent removes only its own.
	OSPFAddressFile = "ospf-addresses.json"
)

// withdrawTimeout bounds the vtysh batch that removes the driver's lines
// when the node is withdrawn: an FRR that hangs must not hang the exit.
const withdrawTimeout = 10 * time.Second

// OSPFState is the state of OSPF in FRR as the driver reads it.
type OSPFState struct {
	// Running is true once an OSPF assignment started the driver.
	Running   bool
	RouterID  string
	Neighbors []frr.Neighbor
	Routes    []frr.Route
	// Problems say why something desired is not advertised: mismatches
	// in the neighbours' packets first (authentication, area, timers).
	Problems []string
	// Error of the last reconcile or state query.
	Error         string
	LastReconcile time.Time
	Reapplied     int
}

// applyOSPF binds the OSPF VIPs' addresses on lo and hands the desired
// state to the FRR driver, starting it for the first OSPF VIP. It returns
// errors and status problems.
func (m *Manager) applyOSPF(ctx context.Context, c *compiled, states []VIPState) ([]error, []string) {
	has := slices.ContainsFunc(c.vips, func(v vipPlan) bool { return v.asg.GetMode() == pb.VIPMode_VIP_MODE_OSPF })
	if !has && m.ospf == nil {
		return nil, nil
	}
	var errs []error
	var problems []string
	if m.ospf == nil {
		if err := m.startOSPF(); err != nil {
			m.ospfErr = err.Error()
			m.ospfStates(c, states)
			return []error{err}, nil
		}
	}
	// Every assigned address is bound, healthy or not: binding announces
	// nothing (only the OSPF lines do), and a VIP that comes back healthy
	// is then advertised at once.
	var addrs []local.Address
	for _, v := range c.vips {
		if v.asg.GetMode() != pb.VIPMode_VIP_MODE_OSPF || v.asg.GetRole() != pb.VIPRole_VIP_ROLE_ANNOUNCE {
			continue
		}
		for _, a := range v.addrs {
			if a.Is4() {
				addrs = append(addrs, local.Address{Prefix: netip.PrefixFrom(a, 32), Interface: frr.DefaultLoopback})
			}
		}
	}
	var bindErr error
	if err := m.ospfAddrs.Apply(addrs); err != nil {
		bindErr = fmt.Errorf("ospf: %w", err)
		errs = append(errs, bindErr)
	}
	uplinks := m.opts.OSPFUplinks
	if len(uplinks) == 0 && has {
		ifname, err := m.routes.InterfaceFor(netip.IPv4Unspecified())
		if err != nil {
			problems = append(problems, fmt.Sprintf("ospf: no default uplink (%v): OSPF VIPs that name no interfaces are not announced; set the agent's --ospf-uplinks", err))
		} else {
			uplinks = []string{ifname}
		}
	}
	id := m.opts.RouterID
	if !id.IsValid() && has {
		id = m.ospfRouterID(c, uplinks)
	}
	d, ps := frr.FromNode(c.node, id, uplinks, c.include)
	for _, p := range ps {
		problems = append(problems, "ospf: "+p.Error())
	}
	if len(d.VIPs)+len(d.Uplinks) > 0 && !d.RouterID.Is4() {
		// The previous desired state stays: a router ID that cannot be
		// found for a moment must not withdraw what is announced.
		err := errors.New("no router ID: no uplink has an IPv4 address and no VIP sets ospf.router_id; set the agent's --router-id")
		m.ospfErr = err.Error()
		m.ospfStates(c, states)
		return append(errs, fmt.Errorf("ospf: %w", err)), problems
	}
	if err := m.ospf.SetDesired(d); err != nil {
		m.ospfErr = err.Error()
		errs = append(errs, fmt.Errorf("ospf: %w", err))
	} else if err := m.reconcileOSPF(ctx); err != nil {
		// Run keeps retrying; the error stays in the status until then.
		m.ospfErr = ""
		m.ospfDesired = d
		errs = append(errs, fmt.Errorf("ospf: %w", err))
	} else {
		m.ospfErr = ""
		m.ospfDesired = d
	}
	if bindErr != nil && m.ospfErr == "" {
		m.ospfErr = bindErr.Error()
	}
	m.ospfStates(c, states)
	return errs, problems
}

// reconcileOSPF applies the desired state now, so that the apply reports
// FRR's errors, and then keeps the periodic reconcile running.
func (m *Manager) reconcileOSPF(ctx context.Context) error {
	err := m.ospf.Reconcile(ctx)
	m.runOSPF()
	return err
}

// ospfStates sets the OSPF VIPs' announcement as far as the apply knows
// it; State refines it with what ospfd originates.
func (m *Manager) ospfStates(c *compiled, states []VIPState) {
	desired := map[string]bool{}
	for _, v := range m.ospfDesired.VIPs {
		desired[v.Name] = true
	}
	for i, v := range c.vips {
		if v.asg.GetMode() != pb.VIPMode_VIP_MODE_OSPF {
			continue
		}
		switch name := v.asg.GetVip(); {
		case !c.include(v.asg):
			states[i].Reason = c.serving[name].Reason
		case m.ospfErr != "":
			states[i].Reason = "ospf: " + m.ospfErr
		case desired[name]:
			states[i].Announced = true
		default:
			states[i].Reason = "not announced: see the errors"
		}
	}
}

// ospfRouterID returns the node's router ID for OSPF: the one BGP derived,
// else the first IPv4 address of the first uplink (the node's address as
// its routers see it), computed once: a router ID that changes restarts
// OSPF's adjacencies.
func (m *Manager) ospfRouterID(c *compiled, uplinks []string) netip.Addr {
	if m.derivedID.IsValid() {
		return m.derivedID
	}
	if m.ospfID.IsValid() {
		return m.ospfID
	}
	candidates := slices.Clone(uplinks)
	for _, v := range c.vips {
		if v.asg.GetMode() == pb.VIPMode_VIP_MODE_OSPF {
			candidates = append(candidates, v.asg.GetInterfaces()...)
		}
	}
	for _, ifname := range candidates {
		a, err := interfaceIPv4(ifname)
		if err != nil {
			m.log.Warn("cannot derive the OSPF router ID from an uplink", "interface", ifname, "error", err)
			continue
		}
		m.ospfID = a
		m.log.Info("ospf router ID from the first IPv4 address of an uplink", "router_id", a, "interface", ifname)
		return a
	}
	return netip.Addr{}
}

// interfaceIPv4 returns the first global unicast IPv4 address of a link.
func interfaceIPv4(ifname string) (netip.Addr, error) {
	ifc, err := net.InterfaceByName(ifname)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("interface %s: %w", ifname, err)
	}
	as, err := ifc.Addrs()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("addresses of %s: %w", ifname, err)
	}
	for _, a := range as {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap().Is4() && ip.Unmap().IsGlobalUnicast() {
			return ip.Unmap(), nil
		}
	}
	return netip.Addr{}, fmt.Errorf("interface %s: no IPv4 address", ifname)
}

// startOSPF creates the FRR driver and the binder of the OSPF addresses,
// and starts the driver's reconcile loop.
func (m *Manager) startOSPF() error {
	var stateFile, addrFile string
	if m.opts.StateDir != "" {
		stateFile = filepath.Join(m.opts.StateDir, OSPFStateFile)
		addrFile = filepath.Join(m.opts.StateDir, OSPFAddressFile)
	}
	addrs, err := local.New(local.Options{StateFile: addrFile, Logger: m.log.With("component", "ospf")})
	if err != nil {
		return fmt.Errorf("ospf addresses: %w", err)
	}
	drv, err := frr.New(frr.Options{
		SocketDir:   m.opts.FRRSocketDir,
		Vtysh:       m.opts.FRRVtysh,
		StateFile:   stateFile,
		CheckHellos: true,
		Interval:    m.opts.FRRInterval,
		Logger:      m.log.With("component", "ospf"),
	})
	if err != nil {
		return fmt.Errorf("ospf: frr driver: %w", err)
	}
	m.ospf, m.ospfAddrs = drv, addrs
	m.log.Info("ospf driver started", "vty_dir", m.opts.FRRSocketDir, "vtysh", m.opts.FRRVtysh)
	return nil
}

// runOSPF starts the driver's periodic reconcile. Only after the first
// desired state is set: a loop that reconciled the empty state first would
// remove every line a previous agent wrote (the state file makes them the
// driver's) and write them again, resetting the adjacencies.
func (m *Manager) runOSPF() {
	if m.ospfStop != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.ospf.Run(ctx)
	}()
	m.ospfStop, m.ospfDone = cancel, done
}

// closeOSPF stops the driver's loop and closes it, leaving FRR's
// configuration and the bound addresses as they are; with release, it
// first removes the lines the driver wrote and unbinds the addresses.
func (m *Manager) closeOSPF(release bool) error {
	if m.ospf == nil {
		return nil
	}
	if m.ospfStop != nil {
		m.ospfStop()
		<-m.ospfDone
		m.ospfStop, m.ospfDone = nil, nil
	}
	var errs []error
	if release {
		ctx, cancel := context.WithTimeout(context.Background(), withdrawTimeout)
		if err := m.ospf.Release(ctx); err != nil {
			errs = append(errs, fmt.Errorf("ospf: release frr configuration: %w", err))
		}
		cancel()
		if err := m.ospfAddrs.Release(); err != nil {
			errs = append(errs, fmt.Errorf("ospf: unbind addresses: %w", err))
		}
	}
	errs = append(errs, m.ospf.Close())
	m.ospf, m.ospfAddrs, m.ospfDesired = nil, nil, frr.Desired{}
	return errors.Join(errs...)
}

// ospfState reads OSPF's state from FRR and refines the OSPF VIPs of vips:
// a VIP counts as announced when it is in this node's router LSA and some
// neighbour is Full (otherwise no router learns it).
func (m *Manager) ospfState(ctx context.Context, vips []VIPState) OSPFState {
	st := OSPFState{Running: true, Error: m.ospfErr}
	s, err := m.ospf.State(ctx)
	if err != nil && st.Error == "" {
		st.Error = err.Error()
	}
	if s.LastError != nil && st.Error == "" {
		st.Error = s.LastError.Error()
	}
	st.RouterID, st.Neighbors, st.Routes = s.RouterID, s.Neighbors, s.Routes
	st.LastReconcile, st.Reapplied = s.LastReconcile, s.Reapplied
	var mismatches []string
	for _, h := range s.Hellos {
		mismatches = append(mismatches, h.Err.Error())
	}
	st.Problems = slices.Clone(mismatches)
	for _, p := range s.Problems {
		st.Problems = append(st.Problems, p.Error())
	}
	if err == nil {
		ospfAnnounced(vips, s, mismatches)
	}
	return st
}

// ospfAnnounced refines the OSPF VIPs of vips that the apply handed to
// FRR with what ospfd does: announced when the VIP is in this node's router
// LSA and some neighbour is Full, else not, with the reason (mismatches in
// the neighbours' packets first, as they explain a missing adjacency).
func ospfAnnounced(vips []VIPState, s frr.State, mismatches []string) {
	full := slices.ContainsFunc(s.Neighbors, frr.Neighbor.Full)
	for i, v := range vips {
		if v.Mode != pb.VIPMode_VIP_MODE_OSPF || !v.Announced {
			continue
		}
		inLSA := slices.ContainsFunc(s.Routes, func(r frr.Route) bool { return r.VIP == v.VIP })
		switch {
		case !inLSA:
			vips[i].Announced = false
			vips[i].Reason = "not in this node's router LSA"
			for _, p := range s.Problems {
				if strings.HasPrefix(p.Error(), "vip "+v.VIP+":") {
					vips[i].Reason = p.Error()
					break
				}
			}
		case !full:
			vips[i].Announced = false
			vips[i].Reason = "no OSPF neighbour in state Full"
			if len(mismatches) > 0 {
				vips[i].Reason += ": " + strings.Join(mismatches, "; ")
			}
		}
	}
}

// ospfStatusProto converts st for the admin API.
func ospfStatusProto(st OSPFState) *pb.OSPFStatus {
	out := &pb.OSPFStatus{
		Running: st.Running, RouterId: st.RouterID, Problems: slices.Clone(st.Problems), Error: st.Error,
		LastReconcileUnixMs: unixMillis(st.LastReconcile), Reapplied: uint64(max(st.Reapplied, 0)),
	}
	for _, n := range st.Neighbors {
		ns := &pb.OSPFNeighborStatus{
			Interface: n.Interface, State: n.State, Role: n.Role,
			DeadTimeMs: uint32(max(n.DeadTime, 0) / time.Millisecond),
		}
		if n.RouterID.IsValid() {
			ns.RouterId = n.RouterID.String()
		}
		if n.Address.IsValid() {
			ns.Address = n.Address.String()
		}
		out.Neighbors = append(out.Neighbors, ns)
	}
	for _, r := range st.Routes {
		out.Routes = append(out.Routes, &pb.OSPFRouteStatus{Vip: r.VIP, Prefix: r.Prefix.String(), Area: r.Area, Cost: r.Cost})
	}
	return out
}
