package fastpath

import (
	"errors"
	"fmt"
	"net/netip"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// FromSnapshot compiles the snapshot's plan into the fast path's Config:
// every FAST entry with its endpoints and forwarding mode, every SLOW entry
// as a pass to the kernel. Unhealthy endpoints are left out (their flows
// are balanced anew); draining ones keep their flows but get no new ones.
// node supplies the node-wide settings, which the snapshot does not carry.
func FromSnapshot(snap *pb.ConfigSnapshot, node Node) (Config, error) {
	c := Config{Node: node}
	var errs []error
	for i, e := range snap.GetCluster().GetPlan() {
		where := fmt.Sprintf("plan[%d] (vip %s, listener %s)", i, e.GetVip(), e.GetListener())
		addr, err := netip.ParseAddr(e.GetAddress())
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: address %q: %w", where, e.GetAddress(), err))
			continue
		}
		if addr.IsUnspecified() {
			// A listener on every address: only the kernel can serve it.
			continue
		}
		if e.GetPort() > 0xffff {
			errs = append(errs, fmt.Errorf("%s: port %d is out of range", where, e.GetPort()))
			continue
		}
		v := VIP{Name: e.GetVip() + "/" + e.GetListener(), Addr: addr, Port: uint16(e.GetPort()), Forward: ForwardPass}
		switch e.GetProtocol() {
		case pb.L4Protocol_L4_PROTOCOL_TCP:
			v.Proto = ProtoTCP
		case pb.L4Protocol_L4_PROTOCOL_UDP:
			v.Proto = ProtoUDP
		default:
			errs = append(errs, fmt.Errorf("%s: protocol %s is neither TCP nor UDP", where, e.GetProtocol()))
			continue
		}
		if e.GetPath() == pb.DataPath_DATA_PATH_FAST {
			fwd, gue, err := forwardOf(e.GetForwarding())
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: forwarding: %w", where, err))
				continue
			}
			v.Forward, v.GUEPort = fwd, gue
			v.ClientAffinity = e.GetAffinity() == pb.Affinity_AFFINITY_CLIENT_IP
			v.Lineage = e.GetLineage()
			for j, ep := range e.GetEndpoints() {
				a, err := netip.ParseAddr(ep.GetAddress())
				if err != nil || ep.GetPort() > 0xffff {
					errs = append(errs, fmt.Errorf("%s: endpoints[%d]: address %q port %d is not valid", where, j, ep.GetAddress(), ep.GetPort()))
					continue
				}
				b := Backend{Addr: a, Port: uint16(ep.GetPort()), Weight: ep.GetWeight()}
				switch ep.GetState() {
				case pb.EndpointState_ENDPOINT_STATE_UNHEALTHY:
					continue
				case pb.EndpointState_ENDPOINT_STATE_DRAINING:
					b.Draining = true
				}
				if b.Weight == 0 && !b.Draining {
					b.Weight = 1
				}
				v.Backends = append(v.Backends, b)
			}
		}
		c.VIPs = append(c.VIPs, v)
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	return c, c.Validate()
}

func forwardOf(f *pb.Forwarding) (Forward, uint16, error) {
	switch f.GetMode() {
	case pb.ForwardingMode_FORWARDING_MODE_UNSPECIFIED, pb.ForwardingMode_FORWARDING_MODE_NAT:
		if f.GetPreserveClientIp() {
			return ForwardNATKeepClient, 0, nil
		}
		return ForwardNAT, 0, nil
	case pb.ForwardingMode_FORWARDING_MODE_DSR:
		switch f.GetEncapsulation() {
		case pb.Encapsulation_ENCAPSULATION_UNSPECIFIED, pb.Encapsulation_ENCAPSULATION_IPIP:
			return ForwardDSRIPIP, 0, nil
		case pb.Encapsulation_ENCAPSULATION_GUE:
			if f.GetGuePort() > 0xffff {
				return 0, 0, fmt.Errorf("gue_port %d is out of range", f.GetGuePort())
			}
			return ForwardDSRGUE, uint16(f.GetGuePort()), nil
		case pb.Encapsulation_ENCAPSULATION_L2:
			return ForwardDSRL2, 0, nil
		}
		return 0, 0, fmt.Errorf("unknown encapsulation %s", f.GetEncapsulation())
	}
	return 0, 0, fmt.Errorf("unknown mode %s", f.GetMode())
}
