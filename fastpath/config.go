package fastpath

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/novaedge/novaedge/fastpath/lineage"
	fastpathbpf "github.com/novaedge/novaedge/gen/bpf/fastpath"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// Forward is what the program does with a VIP entry's packets.
type Forward = fastpathbpf.FastpathFpForward

// The forwarding modes of a VIP entry.
const (
	// ForwardPass hands packets to the kernel, where the slow path listens.
	ForwardPass = fastpathbpf.FastpathFpForwardFP_FWD_PASS
	// ForwardNAT rewrites the destination to the backend and the source to
	// the node's address and a port allocated in BPF.
	ForwardNAT = fastpathbpf.FastpathFpForwardFP_FWD_NAT
	// ForwardNATKeepClient rewrites only the destination; the backends'
	// replies must route back through this node.
	ForwardNATKeepClient = fastpathbpf.FastpathFpForwardFP_FWD_NAT_KEEP_CLIENT
	// ForwardDSRIPIP encapsulates in IPv4 or IPv6 (the backend's family).
	ForwardDSRIPIP = fastpathbpf.FastpathFpForwardFP_FWD_DSR_IPIP
	// ForwardDSRGUE encapsulates in UDP (GUE variant 1).
	ForwardDSRGUE = fastpathbpf.FastpathFpForwardFP_FWD_DSR_GUE
	// ForwardDSRL2 rewrites only the MAC addresses.
	ForwardDSRL2 = fastpathbpf.FastpathFpForwardFP_FWD_DSR_L2
)

// ForwardName is the name of f used in status and inspection output.
func ForwardName(f Forward) string {
	switch f {
	case ForwardPass:
		return "pass"
	case ForwardNAT:
		return "nat"
	case ForwardNATKeepClient:
		return "nat-keep-client"
	case ForwardDSRIPIP:
		return "dsr-ipip"
	case ForwardDSRGUE:
		return "dsr-gue"
	case ForwardDSRL2:
		return "dsr-l2"
	}
	return fmt.Sprintf("forward(%d)", f)
}

// Protocol numbers of VIP entries.
const (
	ProtoTCP = 6
	ProtoUDP = 17
)

// Config is everything the fast path's maps hold, compiled from a snapshot.
type Config struct {
	// VIPs are the VIP entries: fast ones with their backends, and those
	// passed to the slow path.
	VIPs []VIP
	// Node is the node-wide configuration.
	Node Node
}

// VIP is one (address, port, protocol) entry.
type VIP struct {
	// Name says where the entry comes from (the VIP and listener), for
	// inspection only.
	Name string
	Addr netip.Addr
	// Port 0 matches every port of the address and protocol.
	Port    uint16
	Proto   uint8
	Forward Forward
	// GUEPort is the UDP port of ForwardDSRGUE; 0 means 6080.
	GUEPort uint16
	// ClientAffinity places new flows by the client's address alone
	// (sessionAffinity ClientIP) instead of the whole 5-tuple: every
	// connection of a client reaches the same backend while the backends do
	// not change. There is no timeout: the placement lasts as long as the
	// Maglev table.
	ClientAffinity bool
	// Backends of a fast entry; ignored for ForwardPass.
	Backends []Backend
	// Lineage is the table the entry's Maglev table is built from
	// (maglev.BuildFrom), decided by the leader controller so that every
	// node builds the same table; see package lineage. Nil: the table is
	// built from the backends alone, or from the installed one with
	// ManagerOptions.Lineage. A lineage of another table size is ignored.
	Lineage *pb.MaglevLineage
}

// Backend is one endpoint of a fast VIP entry.
type Backend struct {
	Addr netip.Addr
	Port uint16
	// Weight is the relative share of new flows; 0 with Draining keeps
	// existing flows only.
	Weight uint32
	// Draining backends keep their tracked flows but get no new ones.
	Draining bool
}

// Node is the node-wide configuration of the program.
type Node struct {
	// V4 and V6 are the node's addresses: the SNAT source and the outer
	// source of DSR tunnels. An invalid Addr disables those modes for the
	// family (their packets are dropped and counted).
	V4, V6 netip.Addr
	// NATPortMin and NATPortMax bound the SNAT source ports (inclusive),
	// per backend address and port. The agent reserves them with
	// ip_local_reserved_ports so that the host's own connections never
	// pick them. Zero means 10000–32767.
	NATPortMin, NATPortMax uint16
	// Idle lifetimes of tracked flows; zero means 60 s for a TCP flow that
	// has seen only its SYN, 1 h for an open TCP flow, 10 s after a FIN or
	// RST, 60 s for UDP.
	TCPSynTimeout, TCPTimeout, TCPClosingTimeout, UDPTimeout time.Duration
}

// Default SNAT port range: below Linux's default ephemeral range
// (32768–60999), so reserving it takes nothing the host picks for its own
// connections, and wide enough for about 20 000 concurrent flows per
// backend before new ones start to fail (each new flow tries 16 ports).
// Listening sockets on these ports are unaffected: a SNAT flow's replies
// come from a backend and are translated in XDP before the kernel sees them.
const (
	DefaultNATPortMin = 10000
	DefaultNATPortMax = 32767
)

// Validate checks c the way the program needs it, naming the entry and the
// problem: Apply refuses an invalid Config whole.
func (c *Config) Validate() error {
	var errs []error
	seen := make(map[vipKey]string)
	for i, v := range c.VIPs {
		where := fmt.Sprintf("vips[%d] (%s %s)", i, v.Name, vipString(v))
		if !v.Addr.IsValid() {
			errs = append(errs, fmt.Errorf("%s: address is not set", where))
			continue
		}
		if v.Proto != ProtoTCP && v.Proto != ProtoUDP {
			errs = append(errs, fmt.Errorf("%s: protocol %d is neither TCP (6) nor UDP (17)", where, v.Proto))
		}
		k := keyOf(v)
		if other, dup := seen[k]; dup {
			errs = append(errs, fmt.Errorf("%s: same address, port and protocol as %s", where, other))
		}
		seen[k] = where
		if v.Forward > ForwardDSRL2 {
			errs = append(errs, fmt.Errorf("%s: unknown forwarding mode %d", where, v.Forward))
			continue
		}
		if v.Forward == ForwardPass {
			continue
		}
		if v.Lineage != nil {
			if err := lineage.Validate(v.Lineage); err != nil {
				errs = append(errs, fmt.Errorf("%s: lineage: %w", where, err))
			}
		}
		for j, b := range v.Backends {
			bw := fmt.Sprintf("%s: backends[%d] %s", where, j, netip.AddrPortFrom(b.Addr, b.Port))
			if !b.Addr.IsValid() {
				errs = append(errs, fmt.Errorf("%s: address is not set", bw))
				continue
			}
			if b.Addr.Unmap().Is4() != v.Addr.Unmap().Is4() && v.Forward != ForwardDSRIPIP && v.Forward != ForwardDSRGUE {
				errs = append(errs, fmt.Errorf("%s: %s cannot forward between IPv4 and IPv6; only DSR with IPIP or GUE encapsulation can", bw, ForwardName(v.Forward)))
			}
			if (v.Forward == ForwardNAT || v.Forward == ForwardNATKeepClient) && b.Port == 0 && v.Port != 0 {
				errs = append(errs, fmt.Errorf("%s: port is 0", bw))
			}
			needs := c.Node.V4
			if !b.Addr.Unmap().Is4() {
				needs = c.Node.V6
			}
			if (v.Forward == ForwardNAT || v.Forward == ForwardDSRIPIP || v.Forward == ForwardDSRGUE) && !needs.IsValid() {
				errs = append(errs, fmt.Errorf("%s: %s needs the node's %s address (none configured)", bw, ForwardName(v.Forward), family(b.Addr)))
			}
		}
	}
	n := c.Node
	if n.NATPortMin > n.NATPortMax && n.NATPortMax != 0 {
		errs = append(errs, fmt.Errorf("node: NAT port range %d-%d is empty", n.NATPortMin, n.NATPortMax))
	}
	return errors.Join(errs...)
}

func family(a netip.Addr) string {
	if a.Unmap().Is4() {
		return "IPv4"
	}
	return "IPv6"
}

func vipString(v VIP) string {
	proto := "tcp"
	if v.Proto == ProtoUDP {
		proto = "udp"
	}
	port := "*"
	if v.Port != 0 {
		port = fmt.Sprint(v.Port)
	}
	if v.Addr.Unmap().Is4() {
		return fmt.Sprintf("%s:%s/%s", v.Addr.Unmap(), port, proto)
	}
	return fmt.Sprintf("[%s]:%s/%s", v.Addr, port, proto)
}

// vipKey identifies a VIP entry across applies.
type vipKey struct {
	addr  netip.Addr
	port  uint16
	proto uint8
}

func keyOf(v VIP) vipKey { return vipKey{v.Addr.Unmap(), v.Port, v.Proto} }

// backendKey identifies a backend across applies and VIPs: one ID per
// address and port, shared by every VIP that uses it.
type backendKey struct {
	addr netip.Addr
	port uint16
}

func (k backendKey) String() string { return netip.AddrPortFrom(k.addr, k.port).String() }

func sortedVIPs(vs []VIP) []VIP {
	out := slices.Clone(vs)
	slices.SortFunc(out, func(a, b VIP) int {
		return cmp.Or(a.Addr.Unmap().Compare(b.Addr.Unmap()), cmp.Compare(a.Port, b.Port), cmp.Compare(a.Proto, b.Proto))
	})
	return out
}
