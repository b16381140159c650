package local

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/novaedge/novaedge/vip/local/internal/linux"
)

// ErrNoSuchInterface is returned (wrapped) when an address names an interface
// that does not exist on the host.
var ErrNoSuchInterface = errors.New("no such interface")

// Options configure a Manager.
type Options struct {
	// StateFile records the addresses the manager added, so that after a
	// restart the agent knows which addresses are its own and removes only
	// those once they are no longer wanted. Its directory is created when
	// needed. Empty: no state is kept, and only addresses added by this
	// process are ever removed (after a restart, the addresses added before
	// are adopted as not ours and stay bound).
	StateFile string
	// Logger receives one line per address bound, removed or adopted. Nil:
	// nothing is logged.
	Logger *slog.Logger
	// Handle is the netlink handle to bind addresses through; tests pass one
	// opened inside a test network namespace. Nil: netlink in the network
	// namespace of the calling thread.
	Handle *netlink.Handle
}

// Manager keeps the set of bound VIP addresses equal to the one it is given.
// Its methods are safe for concurrent use.
type Manager struct {
	h         *netlink.Handle
	log       *slog.Logger
	stateFile string

	mu sync.Mutex
	// owned holds the addresses this manager (or the one before a restart,
	// per the state file) added; only these are ever removed.
	owned map[Address]struct{}
	// adopted holds wanted addresses that were already bound when the
	// manager came to them; they are reported by Bound but never removed.
	adopted map[Address]struct{}
	// dirty is set when owned differs from what the state file holds.
	dirty bool
}

// New returns a Manager, loading the state file of opts if it exists. A state
// file that cannot be read or parsed is an error naming the file: carrying on
// without it could leave addresses bound forever, or remove the admin's.
func New(opts Options) (*Manager, error) {
	m := &Manager{
		h:         opts.Handle,
		log:       opts.Logger,
		stateFile: opts.StateFile,
		owned:     make(map[Address]struct{}),
		adopted:   make(map[Address]struct{}),
	}
	if m.h == nil {
		// A zero Handle makes netlink open a socket per request in the
		// current namespace, like the package-level functions do, and
		// needs no Close.
		m.h = &netlink.Handle{}
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	if m.stateFile != "" {
		owned, err := loadState(m.stateFile)
		if err != nil {
			return nil, err
		}
		m.owned = owned
	}
	return m, nil
}

// Apply makes the bound set equal to want. It adds the missing addresses
// (IPv6 ones with IFA_F_NODAD, so they are usable at once instead of after
// duplicate address detection), removes the addresses it added earlier that
// are no longer wanted, and never removes an address it did not add: one that
// is already bound is adopted and left alone when no longer wanted. An
// address counts as bound when its IP is on the interface with any prefix
// length. The state file is written after the change. When Apply returns, new
// addresses on links that are up are reachable, IPv6 ones included (see
// waitLocal).
//
// One failing address does not stop the others; the errors are joined, each
// naming its address and interface ("bind 127.0.10.1/32 on lo: ...").
func (m *Manager) Apply(want []Address) error {
	m.mu.Lock()
	defer m.mu.Unlock()

	var errs []error
	wanted := make(map[Address]struct{}, len(want))
	for _, a := range want {
		n, err := normalize(a)
		if err != nil {
			errs = append(errs, fmt.Errorf("bind %s: %w", a, err))
			continue
		}
		wanted[n] = struct{}{}
	}

	links := &linkCache{h: m.h, links: make(map[string]linkResult)}
	var pending []Address
	for _, a := range sortedKeys(wanted) {
		wait, err := m.bind(links, a)
		if err != nil {
			errs = append(errs, err)
		}
		if wait {
			pending = append(pending, a)
		}
	}
	m.waitLocal(pending)
	for _, a := range sortedKeys(m.owned) {
		if _, ok := wanted[a]; ok {
			continue
		}
		if err := m.unbind(links, a); err != nil {
			errs = append(errs, err)
		}
	}
	for _, a := range sortedKeys(m.adopted) {
		if _, ok := wanted[a]; !ok {
			delete(m.adopted, a)
			m.log.Info("vip address no longer wanted, left bound: not added by novaedge",
				"address", a.Prefix.String(), "interface", a.Interface)
		}
	}
	if err := m.save(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Bound returns the addresses currently bound by the manager or adopted by it,
// sorted by IP then interface.
func (m *Manager) Bound() []Address {
	m.mu.Lock()
	defer m.mu.Unlock()
	all := make(map[Address]struct{}, len(m.owned)+len(m.adopted))
	for a := range m.owned {
		all[a] = struct{}{}
	}
	for a := range m.adopted {
		all[a] = struct{}{}
	}
	return sortedKeys(all)
}

// Release removes every address the manager added, forgets the adopted ones
// (leaving them bound) and clears the state file. It is the explicit
// uninstall: the agent does not call it when it stops, so that addresses stay
// bound and a restarted agent keeps serving. Addresses that could not be
// removed stay recorded, so that a later Release can retry them.
func (m *Manager) Release() error {
	m.mu.Lock()
	defer m.mu.Unlock()

	var errs []error
	links := &linkCache{h: m.h, links: make(map[string]linkResult)}
	for _, a := range sortedKeys(m.owned) {
		if err := m.unbind(links, a); err != nil {
			errs = append(errs, err)
		}
	}
	clear(m.adopted)
	m.dirty = true
	if err := m.save(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// bind makes sure a is bound, recording whether it is ours or adopted. wait
// reports an IPv6 address just added on a link that is up, whose local route
// the kernel installs a moment later (see waitLocal).
func (m *Manager) bind(links *linkCache, a Address) (wait bool, err error) {
	_, owned := m.owned[a]
	li, err := links.get(a.Interface)
	if err != nil {
		if errors.Is(err, ErrNoSuchInterface) {
			// The address went with its interface, if it was ever there.
			m.forget(a)
		}
		return false, fmt.Errorf("bind %s: %w", a, err)
	}
	ip := a.Prefix.Addr()
	if _, ok := li.addrs[ip]; ok {
		if !owned {
			m.adopt(a)
		}
		return false, nil
	}
	addr := &netlink.Addr{IPNet: ipNet(a.Prefix)}
	if ip.Is6() {
		addr.Flags = linux.FlagNoDAD
	}
	err = m.h.AddrAdd(li.link, addr)
	switch {
	case err == nil:
		li.addrs[ip] = struct{}{}
		delete(m.adopted, a)
		if !owned {
			m.owned[a] = struct{}{}
			m.dirty = true
		}
		m.log.Info("vip address bound", "address", a.Prefix.String(), "interface", a.Interface)
		return ip.Is6() && linkReady(li.link), nil
	case linux.IsExist(err):
		// Someone added it between the listing and now (or it is there
		// under a form the listing did not show): it is bound, and not
		// by us unless we already owned it.
		li.addrs[ip] = struct{}{}
		if !owned {
			m.adopt(a)
		}
		return false, nil
	default:
		m.forget(a)
		return false, fmt.Errorf("bind %s: %w", a, err)
	}
}

// linkReady reports whether the kernel installs the local routes of new IPv6
// addresses on link right away: it waits until the link is up and running.
func linkReady(link netlink.Link) bool {
	attrs := link.Attrs()
	return attrs.Flags&net.FlagUp != 0 &&
		(attrs.OperState == netlink.OperUp || attrs.OperState == netlink.OperUnknown)
}

// localWait bounds how long Apply waits for the local routes of new IPv6
// addresses.
const localWait = time.Second

// waitLocal waits until the IPv6 addresses in pending are reachable. Even with
// NODAD, the kernel installs the local route of a new IPv6 address from a work
// queue after the netlink request returns; until then the address can be bound
// but a packet to it is unroutable. Waiting here makes "Apply returned" mean
// "the VIP answers". IPv4 local routes are installed synchronously. Past
// localWait the address stays bound and a warning is logged, not an error: the
// kernel will finish on its own (a VRF's local table, for one, is not seen by
// the plain route lookup used here).
func (m *Manager) waitLocal(pending []Address) {
	deadline := time.Now().Add(localWait)
	for len(pending) > 0 {
		rest := pending[:0]
		for _, a := range pending {
			if !m.isLocal(a.Prefix.Addr()) {
				rest = append(rest, a)
			}
		}
		pending = rest
		if len(pending) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, a := range pending {
				m.log.Warn("vip address bound but no local route yet",
					"address", a.Prefix.String(), "interface", a.Interface, "waited", localWait)
			}
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// isLocal reports whether the kernel routes packets to ip to this host.
func (m *Manager) isLocal(ip netip.Addr) bool {
	routes, err := m.h.RouteGet(net.IP(ip.AsSlice()))
	if err != nil {
		return false
	}
	for _, r := range routes {
		if r.Type == linux.RouteLocal {
			return true
		}
	}
	return false
}

// unbind removes an address the manager owns.
func (m *Manager) unbind(links *linkCache, a Address) error {
	li, err := links.get(a.Interface)
	if errors.Is(err, ErrNoSuchInterface) {
		m.forget(a)
		m.log.Info("vip address gone with its interface", "address", a.Prefix.String(), "interface", a.Interface)
		return nil
	}
	if err != nil {
		return fmt.Errorf("unbind %s: %w", a, err)
	}
	err = m.h.AddrDel(li.link, &netlink.Addr{IPNet: ipNet(a.Prefix)})
	if err != nil && !linux.IsAddrNotAvail(err) {
		return fmt.Errorf("unbind %s: %w", a, err)
	}
	// EADDRNOTAVAIL: someone removed it already; either way it is gone.
	delete(li.addrs, a.Prefix.Addr())
	m.forget(a)
	m.log.Info("vip address removed", "address", a.Prefix.String(), "interface", a.Interface)
	return nil
}

func (m *Manager) adopt(a Address) {
	if _, ok := m.adopted[a]; ok {
		return
	}
	m.adopted[a] = struct{}{}
	m.log.Info("vip address already bound, adopted: it will not be removed",
		"address", a.Prefix.String(), "interface", a.Interface)
}

// forget drops a from both sets: it is not bound.
func (m *Manager) forget(a Address) {
	if _, ok := m.owned[a]; ok {
		delete(m.owned, a)
		m.dirty = true
	}
	delete(m.adopted, a)
}

// save writes the state file if owned changed since the last write. On
// failure the manager stays dirty, so the next Apply or Release retries.
func (m *Manager) save() error {
	if m.stateFile == "" || !m.dirty {
		m.dirty = false
		return nil
	}
	if err := saveState(m.stateFile, m.owned); err != nil {
		return err
	}
	m.dirty = false
	return nil
}

// linkCache looks each interface up once per Apply, with the IPs bound on it.
type linkCache struct {
	h     *netlink.Handle
	links map[string]linkResult
}

type linkResult struct {
	info *linkInfo
	err  error
}

type linkInfo struct {
	link  netlink.Link
	addrs map[netip.Addr]struct{}
}

func (c *linkCache) get(name string) (*linkInfo, error) {
	if r, ok := c.links[name]; ok {
		return r.info, r.err
	}
	info, err := c.lookup(name)
	c.links[name] = linkResult{info: info, err: err}
	return info, err
}

// dumpRetries bounds the retries of an address dump that the kernel reports
// as interrupted by a concurrent change.
const dumpRetries = 5

func (c *linkCache) lookup(name string) (*linkInfo, error) {
	link, err := c.h.LinkByName(name)
	if err != nil {
		if _, ok := errors.AsType[netlink.LinkNotFoundError](err); ok {
			return nil, fmt.Errorf("%w %s", ErrNoSuchInterface, name)
		}
		return nil, fmt.Errorf("look up interface %s: %w", name, err)
	}
	var list []netlink.Addr
	for range dumpRetries {
		list, err = c.h.AddrList(link, netlink.FAMILY_ALL)
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("list addresses of %s: %w", name, err)
	}
	info := &linkInfo{link: link, addrs: make(map[netip.Addr]struct{}, len(list))}
	for _, a := range list {
		if a.IPNet == nil {
			continue
		}
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			info.addrs[ip.Unmap()] = struct{}{}
		}
	}
	return info, nil
}
