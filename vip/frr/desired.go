package frr

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"time"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// Desired is the complete OSPF state the driver should have written. The
// zero value means no OSPF: everything the driver wrote is removed.
type Desired struct {
	// RouterID is the node's OSPF router ID. Required when there are
	// uplinks or VIPs.
	RouterID netip.Addr
	// GracefulRestart enables OSPF graceful restart (RFC 3623) with
	// Options.GracePeriod.
	GracefulRestart bool
	// Uplinks are the interfaces OSPF runs on, towards the routers, one
	// per name.
	Uplinks []Uplink
	// VIPs are the host routes to advertise, one per address.
	VIPs []VIP
}

// Uplink is one interface OSPF speaks on.
type Uplink struct {
	// Interface name.
	Interface string
	// Area in dotted form ("0.0.0.0").
	Area string
	// HelloInterval in seconds. Zero means FRR's default, 10.
	HelloInterval uint32
	// DeadInterval in seconds. Zero means FRR's default, 40.
	DeadInterval uint32
	// Auth is the md5 authentication. The zero value means none.
	Auth Auth
	// BFD runs a BFD session (FRR's bfdd) with every neighbour on the
	// interface. Nil means none.
	BFD *BFD
}

// Auth is OSPF cryptographic (md5) authentication (RFC 2328 D.3).
type Auth struct {
	// Key is the md5 key, 1-16 bytes. Empty means no authentication.
	Key string
	// KeyID identifies the key on the wire. Zero means 1.
	KeyID uint8
}

// BFD is the BFD session setting of an uplink.
type BFD struct {
	// DetectMultiplier is the number of missed packets that declares the
	// session down. Zero means 3.
	DetectMultiplier uint32
	// MinTx and MinRx are the desired transmit and required receive
	// intervals, in whole milliseconds (10-60000). Zero means 300ms.
	MinTx, MinRx time.Duration
	// EchoMode enables BFD echo.
	EchoMode bool
}

// VIP is one advertised host route.
type VIP struct {
	// Name of the VIP, for state and errors.
	Name string
	// Address is the IPv4 VIP; it must be bound on the loopback interface
	// to be advertised.
	Address netip.Addr
	// Area in dotted form.
	Area string
	// Cost of the stub link; routers add their cost to this node. Zero
	// means 10.
	Cost uint32
}

// FromNode builds the desired state from the node part of a snapshot: the
// OSPF-mode assignments with role ANNOUNCE. Every one configures its
// uplinks (so adjacencies stay up); the VIP addresses advertised are those
// of the assignments include accepts (nil includes all; the caller leaves
// a VIP out to withdraw it, e.g. when it has no healthy backend). routerID is the
// node's own (by default its IPv4 address), used unless an assignment
// carries one; uplinks are the interfaces used for assignments that name
// none (by default the interface of the node's default route).
//
// Settings that must be the same for every VIP sharing them and are not
// are returned as problems naming the VIP and field, and the first VIP by
// name wins: the router ID, and an uplink's area, timers, authentication
// and BFD. Graceful restart is enabled when any VIP asks for it. IPv6
// addresses need ospf6d, which is not supported: they are reported and
// left out.
func FromNode(node *pb.NodeConfig, routerID netip.Addr, uplinks []string, include func(*pb.VIPAssignment) bool) (Desired, []error) {
	var d Desired
	var problems []error
	problem := func(format string, args ...any) { problems = append(problems, fmt.Errorf(format, args...)) }
	upOwner := map[string]string{}
	upIndex := map[string]int{}
	vipIndex := map[netip.Addr]int{}
	routerIDOwner := ""
	for _, a := range node.GetVips() {
		o := a.GetOspf()
		if a.GetMode() != pb.VIPMode_VIP_MODE_OSPF || a.GetRole() != pb.VIPRole_VIP_ROLE_ANNOUNCE || o == nil {
			continue
		}
		announce := include == nil || include(a)
		name := a.GetVip()
		area, err := dottedArea(o.GetArea())
		if err != nil {
			problem("vip %s: ospf.area: %w: not announced", name, err)
			continue
		}
		ifaces := a.GetInterfaces()
		if len(ifaces) == 0 {
			ifaces = uplinks
		}
		if len(ifaces) == 0 {
			problem("vip %s: interfaces: none given and no default uplink: not announced", name)
			continue
		}
		up := Uplink{Area: area, HelloInterval: o.GetHelloIntervalS(), DeadInterval: o.GetDeadIntervalS()}
		switch o.GetAuthType() {
		case "", "none":
		case "md5":
			if o.GetAuthKeyId() > 255 {
				problem("vip %s: ospf.auth_key_id %d: more than 255: not announced", name, o.GetAuthKeyId())
				continue
			}
			up.Auth = Auth{Key: o.GetAuthKey(), KeyID: uint8(o.GetAuthKeyId())}
			if err := up.Auth.check(); err != nil {
				problem("vip %s: ospf.auth_key: %w: not announced", name, err)
				continue
			}
		default:
			problem("vip %s: ospf.auth_type %q: use none or md5: not announced", name, o.GetAuthType())
			continue
		}
		if b := a.GetBfd(); b.GetEnabled() {
			up.BFD = &BFD{
				DetectMultiplier: b.GetDetectMultiplier(),
				MinTx:            time.Duration(b.GetDesiredMinTxMs()) * time.Millisecond,
				MinRx:            time.Duration(b.GetRequiredMinRxMs()) * time.Millisecond,
				EchoMode:         b.GetEchoMode(),
			}
		}
		if id := o.GetRouterId(); id != "" {
			addr, err := netip.ParseAddr(id)
			switch {
			case err != nil || !addr.Is4():
				problem("vip %s: ospf.router_id %q is not an IPv4 address: ignored", name, id)
			case routerIDOwner == "":
				d.RouterID, routerIDOwner = addr, name
			case addr != d.RouterID:
				problem("vip %s: ospf.router_id %s differs from %s set by vip %s: ignored", name, addr, d.RouterID, routerIDOwner)
			}
		}
		d.GracefulRestart = d.GracefulRestart || o.GetGracefulRestart()
		for _, ifname := range ifaces {
			u := up
			u.Interface = ifname
			if i, ok := upIndex[ifname]; ok {
				if !d.Uplinks[i].equal(u) {
					problem("vip %s: uplink %s is configured differently (area, timers, authentication or bfd) by vip %s: the settings of vip %s apply", name, ifname, upOwner[ifname], upOwner[ifname])
				}
				continue
			}
			upIndex[ifname], upOwner[ifname] = len(d.Uplinks), name
			d.Uplinks = append(d.Uplinks, u)
		}
		if !announce {
			continue
		}
		for _, s := range a.GetAddresses() {
			addr, err := netip.ParseAddr(s)
			if err != nil {
				problem("vip %s: address %q: %w", name, s, err)
				continue
			}
			if !addr.Unmap().Is4() {
				problem("vip %s: address %s: IPv6 needs ospf6d (OSPFv3), which NovaEdge does not drive yet: not announced", name, addr)
				continue
			}
			v := VIP{Name: name, Address: addr.Unmap(), Area: area, Cost: o.GetCost()}
			if i, ok := vipIndex[v.Address]; ok {
				if p := d.VIPs[i]; p.Area != v.Area || p.cost() != v.cost() {
					problem("vip %s: %s is announced with another area or cost by vip %s: those apply", name, v.Address, p.Name)
				}
				continue
			}
			vipIndex[v.Address] = len(d.VIPs)
			d.VIPs = append(d.VIPs, v)
		}
	}
	if len(d.Uplinks) == 0 && len(d.VIPs) == 0 {
		return Desired{}, problems
	}
	if !d.RouterID.IsValid() {
		d.RouterID = routerID
	}
	if !d.RouterID.Is4() {
		problem("no router ID: the node has no IPv4 address and no VIP sets ospf.router_id; set the agent's router ID")
	}
	slices.SortFunc(d.Uplinks, func(x, y Uplink) int { return cmp.Compare(x.Interface, y.Interface) })
	slices.SortFunc(d.VIPs, func(x, y VIP) int { return x.Address.Compare(y.Address) })
	return d, problems
}

func (u Uplink) equal(v Uplink) bool {
	if (u.BFD == nil) != (v.BFD == nil) || u.BFD != nil && *u.BFD != *v.BFD {
		return false
	}
	u.BFD, v.BFD = nil, nil
	return u == v
}

func (a Auth) check() error {
	if len(a.Key) > 16 {
		return fmt.Errorf("md5 key of %d bytes: OSPF md5 keys are 1-16 bytes", len(a.Key))
	}
	for _, c := range a.Key {
		// vtysh takes the key as one word of printable ASCII.
		if c <= ' ' || c > '~' {
			return fmt.Errorf("md5 key: only printable ASCII without spaces can be given to FRR")
		}
	}
	return nil
}

func (v VIP) cost() uint32 { return cmp.Or(v.Cost, 10) }

// check validates d before anything is applied.
func (d *Desired) check() error {
	if len(d.Uplinks) == 0 && len(d.VIPs) == 0 {
		return nil
	}
	if !d.RouterID.Is4() {
		return fmt.Errorf("router id %v: must be an IPv4 address", d.RouterID)
	}
	seen := map[string]bool{}
	for i, u := range d.Uplinks {
		switch {
		case !validIfname(u.Interface):
			return fmt.Errorf("uplinks[%d].interface %q: not an interface name", i, u.Interface)
		case seen[u.Interface]:
			return fmt.Errorf("uplinks[%d].interface %s: listed twice", i, u.Interface)
		case u.HelloInterval > 65535 || u.DeadInterval > 65535:
			return fmt.Errorf("uplinks[%d] (%s): hello and dead intervals are 1-65535 seconds", i, u.Interface)
		case u.DeadInterval != 0 && u.DeadInterval <= cmp.Or(u.HelloInterval, 10):
			return fmt.Errorf("uplinks[%d].dead_interval %d (%s): must be greater than the hello interval", i, u.DeadInterval, u.Interface)
		}
		if _, err := dottedArea(u.Area); err != nil {
			return fmt.Errorf("uplinks[%d].area (%s): %w", i, u.Interface, err)
		}
		if err := u.Auth.check(); err != nil {
			return fmt.Errorf("uplinks[%d].auth (%s): %w", i, u.Interface, err)
		}
		if b := u.BFD; b != nil {
			if b.DetectMultiplier > 255 {
				return fmt.Errorf("uplinks[%d].bfd.detect_multiplier %d (%s): must be 2-255", i, b.DetectMultiplier, u.Interface)
			}
			for _, iv := range []time.Duration{b.MinTx, b.MinRx} {
				if iv != 0 && (iv < 10*time.Millisecond || iv > 60*time.Second) {
					return fmt.Errorf("uplinks[%d].bfd (%s): interval %v: FRR takes 10ms-60s", i, u.Interface, iv)
				}
			}
		}
		seen[u.Interface] = true
	}
	addrs := map[netip.Addr]bool{}
	for i, v := range d.VIPs {
		switch {
		case !v.Address.Is4():
			return fmt.Errorf("vips[%d].address %v (%s): must be IPv4 (IPv6 needs ospf6d, not supported)", i, v.Address, v.Name)
		case addrs[v.Address]:
			return fmt.Errorf("vips[%d].address %v (%s): listed twice", i, v.Address, v.Name)
		case v.Cost > 65535:
			return fmt.Errorf("vips[%d].cost %d (%s): must be 1-65535", i, v.Cost, v.Name)
		}
		if _, err := dottedArea(v.Area); err != nil {
			return fmt.Errorf("vips[%d].area (%s): %w", i, v.Name, err)
		}
		addrs[v.Address] = true
	}
	return nil
}

// validIfname accepts the names Linux accepts and vtysh can take as one
// word.
func validIfname(s string) bool {
	if s == "" || len(s) > 15 || s == "." || s == ".." {
		return false
	}
	for _, c := range s {
		if c <= ' ' || c > '~' || c == '/' || c == ':' {
			return false
		}
	}
	return true
}

// dottedArea turns "0", "10" or "0.0.0.10" into dotted form; empty means
// the backbone.
func dottedArea(s string) (string, error) {
	if s == "" {
		return "0.0.0.0", nil
	}
	if a, err := netip.ParseAddr(s); err == nil && a.Is4() {
		return a.String(), nil
	}
	var n uint64
	if _, err := fmt.Sscanf(s, "%d", &n); err != nil || fmt.Sprint(n) != s || n > 0xffffffff {
		return "", fmt.Errorf("invalid area %q: use a number 0-4294967295 or dotted form like 0.0.0.0", s)
	}
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}).String(), nil
}
