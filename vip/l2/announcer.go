package l2

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Errors callers test with errors.Is.
var (
	// ErrLeaseExpired is returned by Announce when the lease is not fresh:
	// a node that may not answer must not claim a VIP either.
	ErrLeaseExpired = errors.New("lease expired")
	// ErrNotAnnounced is returned by Release for a VIP that is not announced
	// on that interface.
	ErrNotAnnounced = errors.New("not announced")
	// ErrClosed is returned by calls on a closed Announcer.
	ErrClosed = errors.New("announcer closed")
)

// Announcement is one VIP announced on one interface.
type Announcement struct {
	// Interface is the name of the link the VIP is announced on.
	Interface string
	// Addr is the VIP.
	Addr netip.Addr
}

// String returns the announcement as "198.51.100.10 on eth0", the form
// errors and logs use.
func (a Announcement) String() string { return a.Addr.String() + " on " + a.Interface }

// Counters are totals since New, over all interfaces.
type Counters struct {
	// GARPs is the number of gratuitous ARP frames sent (two per round in
	// GARPBoth mode).
	GARPs uint64
	// UnsolicitedNAs is the number of unsolicited neighbour advertisements
	// sent.
	UnsolicitedNAs uint64
	// ARPReplies is the number of ARP requests answered.
	ARPReplies uint64
	// SolicitedNAs is the number of neighbour solicitations answered.
	SolicitedNAs uint64
	// Suppressed is the number of answers and announcements not sent because
	// the lease had run out.
	Suppressed uint64
	// Conflicts is the number of ARP packets and neighbour advertisements
	// in which another MAC claimed an announced VIP.
	Conflicts uint64
}

type counters struct {
	garps, unsolicitedNAs, arpReplies, solicitedNAs, suppressed, conflicts atomic.Uint64
}

// Announcer announces VIPs on Ethernet links and answers ARP and NDP for
// them while its lease is fresh. Its methods are safe for concurrent use.
type Announcer struct {
	opts Options
	log  *slog.Logger

	leaseMu sync.Mutex
	lease   time.Time

	// mu serialises Announce, Release and Close; the responders never take
	// it, so that a slow change never delays an answer.
	mu        sync.Mutex
	closed    bool
	links     map[string]*link
	schedules map[Announcement]*schedule
	bound     map[netip.Addr]*binding

	readers sync.WaitGroup
	count   counters
}

// schedule is the goroutine repeating one announcement.
type schedule struct {
	stop chan struct{}
	done chan struct{}
}

// New returns an Announcer with an expired lease: it answers nothing until
// the first [Announcer.Renew].
func New(opts Options) (*Announcer, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Announcer{
		opts:      o,
		log:       o.Logger,
		links:     make(map[string]*link),
		schedules: make(map[Announcement]*schedule),
		bound:     make(map[netip.Addr]*binding),
	}, nil
}

// Renew sets the end of the lease: the Announcer answers and announces
// while the clock is before until. Renewing is the caller's statement that
// this node is still the active one; a zero until revokes the lease at
// once. The time carries the clock's monotonic reading when it comes from
// Options.Clock.Now, so wall-clock steps do not move it.
func (a *Announcer) Renew(until time.Time) {
	a.leaseMu.Lock()
	a.lease = until
	a.leaseMu.Unlock()
}

// Lease returns the end of the lease as last renewed.
func (a *Announcer) Lease() time.Time {
	a.leaseMu.Lock()
	defer a.leaseMu.Unlock()
	return a.lease
}

// fresh reports whether the lease allows sending now.
func (a *Announcer) fresh() bool {
	return a.opts.Clock.Now().Before(a.Lease())
}

// Announce claims addr on the Ethernet link ifname: it binds addr on the
// bind interface, keeps the kernel from answering for it on ifname, starts
// answering ARP (IPv4) or neighbour solicitations (IPv6) for it, and sends
// Options.Repeat rounds of gratuitous announcements, the first before it
// returns. Announcing what is already announced does nothing. The lease
// must be fresh ([ErrLeaseExpired] otherwise). On error nothing is left
// changed, except the arp_ignore and arp_announce sysctls.
func (a *Announcer) Announce(ifname string, addr netip.Addr) error {
	key := Announcement{Interface: ifname, Addr: addr}
	if err := checkVIP(addr); err != nil {
		return fmt.Errorf("announce %s: %w", key, err)
	}
	if ifname == "" {
		return fmt.Errorf("announce %s: interface name is empty", addr)
	}
	if ifname == a.opts.BindInterface {
		return fmt.Errorf("announce %s: the announce interface is the bind interface, where the kernel would answer for the vip without a lease", key)
	}
	if !a.fresh() {
		return fmt.Errorf("announce %s: %w (at %s)", key, ErrLeaseExpired, a.Lease().Format(time.RFC3339Nano))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return fmt.Errorf("announce %s: %w", key, ErrClosed)
	}
	if _, ok := a.schedules[key]; ok {
		return nil
	}
	if err := a.claim(key); err != nil {
		return fmt.Errorf("announce %s: %w", key, err)
	}
	return nil
}

// claim does the work of Announce with a.mu held, undoing what it did when
// a step fails.
func (a *Announcer) claim(key Announcement) (err error) {
	l := a.links[key.Interface]
	if l == nil {
		if l, err = a.openLink(key.Interface); err != nil {
			return err
		}
		a.links[key.Interface] = l
	}
	defer func() {
		if err != nil && l.empty() {
			l.close()
			delete(a.links, key.Interface)
		}
	}()
	if err := l.checkNotBound(key.Addr); err != nil {
		return err
	}
	if err := l.prepareFamily(key.Addr.Is4()); err != nil {
		return err
	}
	if err := a.bind(key.Addr); err != nil {
		return err
	}
	if err := l.add(key.Addr); err != nil {
		a.unbindLogged(key.Addr)
		return err
	}
	var t Timer
	if a.opts.Repeat > 1 {
		// The timer exists before the first round goes out, so that a test
		// that sees the round can step a fake clock past the next one.
		t = a.opts.Clock.NewTimer(a.opts.Interval)
	}
	if err := a.announceOnce(l, key.Addr); err != nil {
		if t != nil {
			t.Stop()
		}
		a.dropLogged(l, key.Addr)
		return err
	}
	s := &schedule{stop: make(chan struct{}), done: make(chan struct{})}
	a.schedules[key] = s
	go a.repeat(l, key.Addr, t, s)
	return nil
}

// repeat sends the remaining rounds of an announcement, one per tick of t,
// until they are sent or s is stopped.
func (a *Announcer) repeat(l *link, addr netip.Addr, t Timer, s *schedule) {
	defer close(s.done)
	if t == nil {
		return
	}
	defer t.Stop()
	for left := a.opts.Repeat - 1; left > 0; left-- {
		select {
		case <-s.stop:
			return
		case <-t.C():
		}
		if left > 1 {
			t.Reset(a.opts.Interval)
		}
		if err := a.announceOnce(l, addr); err != nil {
			a.log.Warn("gratuitous announcement failed", "interface", l.name, "vip", addr, "error", err)
		}
	}
}

// announceOnce sends one round of gratuitous announcements for addr, unless
// the lease has run out.
func (a *Announcer) announceOnce(l *link, addr netip.Addr) error {
	if !a.fresh() {
		a.count.suppressed.Add(1)
		a.log.Info("gratuitous announcement suppressed: lease expired", "interface", l.name, "vip", addr)
		return nil
	}
	if addr.Is4() {
		return l.sendGARP(addr, a.opts.GARP, &a.count.garps)
	}
	return l.sendUnsolicitedNA(addr, &a.count.unsolicitedNAs)
}

// Release stops announcing and answering for addr on ifname and removes
// the address from the bind interface once no interface announces it,
// unless it was there before the first Announce.
func (a *Announcer) Release(ifname string, addr netip.Addr) error {
	key := Announcement{Interface: ifname, Addr: addr}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return fmt.Errorf("release %s: %w", key, ErrClosed)
	}
	if err := a.release(key); err != nil {
		return fmt.Errorf("release %s: %w", key, err)
	}
	return nil
}

func (a *Announcer) release(key Announcement) error {
	s, ok := a.schedules[key]
	if !ok {
		return ErrNotAnnounced
	}
	close(s.stop)
	<-s.done
	delete(a.schedules, key)
	l := a.links[key.Interface]
	errs := []error{l.remove(key.Addr), a.unbind(key.Addr)}
	if l.empty() {
		l.close()
		delete(a.links, key.Interface)
	} else {
		l.closeUnusedFamilies()
	}
	return errors.Join(errs...)
}

// dropLogged undoes l.add and a.bind after a failed first round.
func (a *Announcer) dropLogged(l *link, addr netip.Addr) {
	if err := l.remove(addr); err != nil {
		a.log.Warn("undo announcement", "interface", l.name, "vip", addr, "error", err)
	}
	a.unbindLogged(addr)
}

func (a *Announcer) unbindLogged(addr netip.Addr) {
	if err := a.unbind(addr); err != nil {
		a.log.Warn("undo binding", "vip", addr, "error", err)
	}
}

// Active returns the announcements in effect, ordered by interface, then
// address. It lists what was announced, whether or not the lease is fresh.
func (a *Announcer) Active() []Announcement {
	a.mu.Lock()
	out := make([]Announcement, 0, len(a.schedules))
	for k := range a.schedules {
		out = append(out, k)
	}
	a.mu.Unlock()
	slices.SortFunc(out, compareAnnouncement)
	return out
}

func compareAnnouncement(x, y Announcement) int {
	if c := cmp.Compare(x.Interface, y.Interface); c != 0 {
		return c
	}
	return x.Addr.Compare(y.Addr)
}

// Counters returns the totals so far.
func (a *Announcer) Counters() Counters {
	return Counters{
		GARPs:          a.count.garps.Load(),
		UnsolicitedNAs: a.count.unsolicitedNAs.Load(),
		ARPReplies:     a.count.arpReplies.Load(),
		SolicitedNAs:   a.count.solicitedNAs.Load(),
		Suppressed:     a.count.suppressed.Load(),
		Conflicts:      a.count.conflicts.Load(),
	}
}

// Close releases every announcement (removing the addresses it bound) and
// stops the responders. The node stops claiming its VIPs at once; a
// successor process announces them again.
func (a *Announcer) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	keys := make([]Announcement, 0, len(a.schedules))
	for k := range a.schedules {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareAnnouncement)
	var errs []error
	for _, k := range keys {
		if err := a.release(k); err != nil {
			errs = append(errs, fmt.Errorf("release %s: %w", k, err))
		}
	}
	a.closed = true
	a.mu.Unlock()
	a.readers.Wait()
	return errors.Join(errs...)
}

// checkVIP rejects addresses that cannot be a VIP announced on a segment.
func checkVIP(addr netip.Addr) error {
	switch {
	case !addr.IsValid():
		return errors.New("invalid address")
	case addr.Zone() != "":
		return errors.New("an IPv6 zone is not allowed, name the interface instead")
	case addr.Is4In6():
		return fmt.Errorf("IPv4-mapped address: use %s", addr.Unmap())
	case addr.IsUnspecified(), addr.IsMulticast(), addr.IsLoopback(), addr.IsLinkLocalUnicast(),
		addr.Is4() && addr == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return errors.New("not a unicast address that can be announced")
	}
	return nil
}
