package agent

import (
	"context"
	"errors"
	"fmt"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/vip/local"
)

// AddressBinder is what LocalVIPs needs from vip/local's Manager.
type AddressBinder interface {
	Apply(want []local.Address) error
	Bound() []local.Address
}

// LocalVIPs binds the addresses of this node's Local-mode VIPs on the host,
// so the slow path's listeners (and clients on this host) can use them.
// Addresses of other modes are bound by their announcers (vip/l2, vip/bgp).
type LocalVIPs struct {
	Binder AddressBinder
}

var _ Applier = (*LocalVIPs)(nil)

// Name returns "local-vips".
func (l *LocalVIPs) Name() string { return "local-vips" }

// Compile collects the addresses to bind; a malformed address or interface
// name rejects the snapshot before anything changes.
func (l *LocalVIPs) Compile(snap *pb.ConfigSnapshot) (Change, error) {
	want, err := LocalAddresses(snap)
	if err != nil {
		return nil, err
	}
	return ChangeFunc(func(context.Context) error { return l.Binder.Apply(want) }), nil
}

// BoundAddresses returns the bound addresses as strings, for status.
func (l *LocalVIPs) BoundAddresses() []string {
	var out []string
	for _, a := range l.Binder.Bound() {
		out = append(out, a.String())
	}
	return out
}

// LocalAddresses returns the host addresses of snap's active Local VIPs: each
// address on each of the VIP's interfaces (lo when it names none).
func LocalAddresses(snap *pb.ConfigSnapshot) ([]local.Address, error) {
	var (
		out  []local.Address
		errs []error
	)
	for _, v := range snap.GetNode().GetVips() {
		if v.GetMode() != pb.VIPMode_VIP_MODE_LOCAL || v.GetRole() != pb.VIPRole_VIP_ROLE_ACTIVE {
			continue
		}
		ifaces := v.GetInterfaces()
		if len(ifaces) == 0 {
			ifaces = []string{""}
		}
		for _, addr := range v.GetAddresses() {
			for _, ifc := range ifaces {
				a, err := local.ParseAddress(addr, ifc)
				if err != nil {
					errs = append(errs, fmt.Errorf("VIP %s: %w", v.GetVip(), err))
					continue
				}
				out = append(out, a)
			}
		}
	}
	return out, errors.Join(errs...)
}
