package attach

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
)

// Attachment describes one pinned XDP link, for `novaedgectl fastpath
// status` and the agent's status.
type Attachment struct {
	// Pin says where the link is pinned and for which interface.
	Pin
	// Ifindex is the interface the link is attached to, from the link's
	// info; 0 when that interface was deleted.
	Ifindex int
	// LinkID identifies the BPF link.
	LinkID link.ID
	// ProgramID, ProgramName and ProgramTag identify the program in the
	// link. The name is the kernel's, truncated to 15 characters.
	ProgramID   ebpf.ProgramID
	ProgramName string
	ProgramTag  string
	// Mode is the mode in effect, as netlink reports it; meaningful only
	// when Attached.
	Mode Mode
	// Attached is true when the interface named by the pin exists with the
	// link's ifindex and netlink reports the link's program on it.
	Attached bool
	// Problem says why Attached is false, e.g. "interface gone".
	Problem string
}

// List describes the links pinned under root, in every layout version,
// sorted by version then interface. A missing root has none.
func List(root string) ([]Attachment, error) {
	pins, err := scanPins(root)
	if err != nil {
		return nil, fmt.Errorf("list xdp links: %w", err)
	}
	out := make([]Attachment, 0, len(pins))
	var errs []error
	for _, p := range pins {
		a, err := describe(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, a)
	}
	return out, errors.Join(errs...)
}

func describe(p Pin) (Attachment, error) {
	a := Attachment{Pin: p}
	l, err := link.LoadPinnedLink(p.Path, nil)
	if err != nil {
		return a, fmt.Errorf("load pinned link %s: %w", p.Path, err)
	}
	defer func() { _ = l.Close() }()
	info, err := l.Info()
	if err != nil {
		return a, fmt.Errorf("info of pinned link %s: %w", p.Path, err)
	}
	x := info.XDP()
	if x == nil {
		return a, fmt.Errorf("pin %s holds a link of type %d, not an xdp link", p.Path, info.Type)
	}
	a.Ifindex, a.LinkID, a.ProgramID = int(x.Ifindex), info.ID, info.Program

	if prog, err := ebpf.NewProgramFromID(info.Program); err == nil {
		if pi, err := prog.Info(); err == nil {
			a.ProgramName, a.ProgramTag = pi.Name, pi.Tag
		}
		_ = prog.Close()
	}

	if a.Ifindex == 0 {
		a.Problem = "interface gone: the link is attached nowhere"
		return a, nil
	}
	dev, err := netlink.LinkByIndex(a.Ifindex)
	if err != nil {
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) {
			a.Problem = fmt.Sprintf("ifindex %d not found in this network namespace", a.Ifindex)
			return a, nil
		}
		return a, fmt.Errorf("read xdp state of %s: %w", p.Ifname, err)
	}
	attrs := dev.Attrs()
	switch xdp := attrs.Xdp; {
	case attrs.Name != p.Ifname:
		a.Problem = fmt.Sprintf("ifindex %d is named %s now", a.Ifindex, attrs.Name)
	case xdp == nil || !xdp.Attached:
		a.Problem = "netlink reports no xdp program on the interface"
	case ebpf.ProgramID(xdp.ProgId) != a.ProgramID:
		a.Problem = fmt.Sprintf("netlink reports program %d on the interface, not the link's", xdp.ProgId)
	default:
		a.Attached, a.Mode = true, modeFromAttached(xdp.AttachMode)
	}
	return a, nil
}
