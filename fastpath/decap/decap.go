package decap

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	decapbpf "github.com/novaedge/novaedge/gen/bpf/decap"
)

// DefaultGUEPort is the UDP destination port of GUE-encapsulated packets
// unless Options.GUEPort says otherwise.
const DefaultGUEPort = 6080

var (
	// ErrClosed is returned by the methods of a closed Decap.
	ErrClosed = errors.New("decap program closed")
	// ErrAttached is returned by Attach for an interface the program is
	// already attached to.
	ErrAttached = errors.New("already attached")
	// ErrNotAttached is returned by Detach for an interface the program is
	// not attached to.
	ErrNotAttached = errors.New("not attached")
)

// Mode is the way an XDP program is attached to an interface.
type Mode int

const (
	// ModeAuto attaches in native mode and, if the driver refuses, in
	// generic mode.
	ModeAuto Mode = iota
	// ModeNative runs the program in the driver, before an skb exists.
	ModeNative
	// ModeGeneric runs the program on the skb, for any driver, slower.
	ModeGeneric
)

// String returns the mode's name as ip-link(8) shows it.
func (m Mode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeNative:
		return "xdpdrv"
	case ModeGeneric:
		return "xdpgeneric"
	default:
		return fmt.Sprintf("Mode(%d)", int(m))
	}
}

// Options configures Load.
type Options struct {
	// GUEPort is the UDP destination port of GUE packets to decapsulate.
	// Zero means DefaultGUEPort.
	GUEPort uint16
	// LocalAddrs, if not empty, restricts decapsulation to packets whose
	// outer destination is one of them; others pass untouched. Empty means
	// every encapsulated packet is decapsulated, whatever its outer
	// destination.
	LocalAddrs []netip.Addr
	// Logger receives a message when native attachment falls back to
	// generic; nil discards it.
	Logger *slog.Logger
	// PinPath, if set, is a directory (on a bpffs) where the maps are
	// pinned by name and reused from, so the counters outlive the process
	// that loaded the program (novaedgectl decap).
	PinPath string
}

// Decap is the loaded decapsulation program with its maps and the
// interfaces it is attached to. Its methods are safe for concurrent use.
type Decap struct {
	objs decapbpf.DecapObjects
	log  *slog.Logger

	// mu serialises changes to the config entry, the allow-list and links.
	mu     sync.Mutex
	cfg    decapbpf.DecapConfig
	links  map[string]attachment
	closed bool
}

// attachment is the program attached to one interface.
type attachment struct {
	link link.Link
	mode Mode
}

// Load loads the program and its maps into the kernel and configures them
// from opts. A verifier rejection is returned with the verifier's whole log
// (an *ebpf.VerifierError in the chain).
func Load(opts Options) (*Decap, error) {
	spec, err := decapbpf.LoadDecap()
	if err != nil {
		return nil, fmt.Errorf("decap spec: %w", err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Decap{log: log, links: make(map[string]attachment)}
	var copts *ebpf.CollectionOptions
	if opts.PinPath != "" {
		for name, m := range spec.Maps {
			if !strings.HasPrefix(name, ".") {
				m.Pinning = ebpf.PinByName
			}
		}
		copts = &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: opts.PinPath}}
	}
	if err := spec.LoadAndAssign(&d.objs, copts); err != nil {
		return nil, loadError(err)
	}
	if err := d.SetGUEPort(opts.GUEPort); err != nil {
		_ = d.objs.Close()
		return nil, err
	}
	if err := d.SetLocalAddrs(opts.LocalAddrs); err != nil {
		_ = d.objs.Close()
		return nil, err
	}
	return d, nil
}

// loadError describes a failure to load the objects; a verifier rejection
// comes with the verifier's whole log, which names the instruction refused.
func loadError(err error) error {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		// %+w prints the whole log, as %+v does, and wraps.
		return fmt.Errorf("load decap program: %+w", ve)
	}
	return fmt.Errorf("load decap program: %w", err)
}

// SetGUEPort changes the UDP destination port of GUE packets to
// decapsulate; zero means DefaultGUEPort. It takes effect for the next
// packet.
func (d *Decap) SetGUEPort(port uint16) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	if port == 0 {
		port = DefaultGUEPort
	}
	cfg := d.cfg
	cfg.GuePort = port
	return d.writeConfig(cfg)
}

// SetLocalAddrs replaces the allow-list of outer destinations (see
// Options.LocalAddrs); an empty list turns it off. IPv4-mapped IPv6
// addresses count as IPv4 ones and zones are ignored. While the list
// changes, a packet to an address in both the old and the new list is
// always decapsulated.
func (d *Decap) SetLocalAddrs(addrs []netip.Addr) error {
	keys := make(map[decapbpf.DecapLocalAddr]struct{}, len(addrs))
	for _, a := range addrs {
		if !a.IsValid() {
			return fmt.Errorf("local address: invalid address in %v", addrs)
		}
		keys[decapbpf.DecapLocalAddr{Addr: a.Unmap().As16()}] = struct{}{}
	}
	if limit := int(d.objs.DecapAddrs.MaxEntries()); len(keys) > limit {
		return fmt.Errorf("local addresses: %d, at most %d", len(keys), limit)
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	if len(keys) == 0 {
		// Off first, so that no packet meets a half-emptied list.
		cfg := d.cfg
		cfg.LocalOnly = 0
		if err := d.writeConfig(cfg); err != nil {
			return err
		}
	}
	var present byte = 1
	for k := range keys {
		if err := d.objs.DecapAddrs.Put(k, present); err != nil {
			return fmt.Errorf("add local address %v: %w", netip.AddrFrom16(k.Addr).Unmap(), err)
		}
	}
	var stale []decapbpf.DecapLocalAddr
	var k decapbpf.DecapLocalAddr
	var v byte
	it := d.objs.DecapAddrs.Iterate()
	for it.Next(&k, &v) {
		if _, ok := keys[k]; !ok {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("list local addresses: %w", err)
	}
	for _, k := range stale {
		if err := d.objs.DecapAddrs.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("remove local address %v: %w", netip.AddrFrom16(k.Addr).Unmap(), err)
		}
	}
	if len(keys) > 0 {
		cfg := d.cfg
		cfg.LocalOnly = 1
		return d.writeConfig(cfg)
	}
	return nil
}

// writeConfig stores cfg as the program's config entry and remembers it.
// d.mu must be held.
func (d *Decap) writeConfig(cfg decapbpf.DecapConfig) error {
	if err := d.objs.DecapConfig.Put(uint32(0), cfg); err != nil {
		return fmt.Errorf("write decap config: %w", err)
	}
	d.cfg = cfg
	return nil
}

// Attach attaches the program to the interface named ifname, looked up in
// the network namespace of the calling thread, and returns the mode in
// effect: ModeAuto tries native mode first and falls back to generic mode.
// The attachment lasts until Detach, Close or the end of the process.
func (d *Decap) Attach(ifname string, mode Mode) (Mode, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return 0, ErrClosed
	}
	if _, ok := d.links[ifname]; ok {
		return 0, fmt.Errorf("attach xdp to %s: %w", ifname, ErrAttached)
	}
	iface, err := net.InterfaceByName(ifname)
	if err != nil {
		return 0, fmt.Errorf("attach xdp to %s: %w", ifname, err)
	}

	var l link.Link
	switch mode {
	case ModeNative, ModeGeneric:
		l, err = d.attach(iface.Index, mode)
	case ModeAuto:
		mode = ModeNative
		l, err = d.attach(iface.Index, mode)
		if err != nil {
			nativeErr := err
			mode = ModeGeneric
			l, err = d.attach(iface.Index, mode)
			if err != nil {
				err = errors.Join(nativeErr, err)
			} else {
				d.log.Info("native xdp refused, attached in generic mode",
					"interface", ifname, "error", nativeErr)
			}
		}
	default:
		err = fmt.Errorf("unknown mode %v", mode)
	}
	if err != nil {
		return 0, fmt.Errorf("attach xdp to %s: %w", ifname, err)
	}
	d.links[ifname] = attachment{link: l, mode: mode}
	return mode, nil
}

// attach links the program to ifindex in mode, native or generic.
func (d *Decap) attach(ifindex int, mode Mode) (link.Link, error) {
	flags := link.XDPDriverMode
	if mode == ModeGeneric {
		flags = link.XDPGenericMode
	}
	l, err := link.AttachXDP(link.XDPOptions{
		Program:   d.objs.Decap,
		Interface: ifindex,
		Flags:     flags,
	})
	if err != nil {
		return nil, fmt.Errorf("%v: %w", mode, err)
	}
	return l, nil
}

// Detach removes the program from the interface named ifname.
func (d *Decap) Detach(ifname string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	a, ok := d.links[ifname]
	if !ok {
		return fmt.Errorf("detach xdp from %s: %w", ifname, ErrNotAttached)
	}
	delete(d.links, ifname)
	if err := a.link.Close(); err != nil {
		return fmt.Errorf("detach xdp from %s: %w", ifname, err)
	}
	return nil
}

// Close detaches the program from every interface and unloads it with its
// maps. Closing a closed Decap does nothing.
func (d *Decap) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	var errs []error
	for ifname, a := range d.links {
		if err := a.link.Close(); err != nil {
			errs = append(errs, fmt.Errorf("detach xdp from %s: %w", ifname, err))
		}
	}
	clear(d.links)
	if err := d.objs.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close decap objects: %w", err))
	}
	return errors.Join(errs...)
}

// Counters are the program's packet counters, summed over CPUs, since it
// was loaded. Every packet is counted in exactly one field.
type Counters struct {
	// IP4InIP4 counts IPv4 packets decapsulated from IPv4 (IPIP).
	IP4InIP4 uint64
	// IP6InIP6 counts IPv6 packets decapsulated from IPv6.
	IP6InIP6 uint64
	// IP6InIP4 counts IPv6 packets decapsulated from IPv4 (protocol 41).
	IP6InIP4 uint64
	// IP4InIP6 counts IPv4 packets decapsulated from IPv6 (next header 4).
	IP4InIP6 uint64
	// GUEIP4 counts packets decapsulated from GUE in IPv4, either family.
	GUEIP4 uint64
	// GUEIP6 counts packets decapsulated from GUE in IPv6, either family.
	GUEIP6 uint64
	// Passed counts packets passed untouched because they are not an
	// encapsulation the program strips.
	Passed uint64
	// NotLocal counts encapsulated packets passed untouched because the
	// allow-list is on and does not hold their outer destination.
	NotLocal uint64
	// Fragments counts IPv4 fragments, passed untouched.
	Fragments uint64
	// Malformed counts packets dropped for a truncated or inconsistent
	// header on the way to an inner packet.
	Malformed uint64
}

// Decapsulated returns the packets decapsulated, of every kind.
func (c Counters) Decapsulated() uint64 {
	return c.IP4InIP4 + c.IP6InIP6 + c.IP6InIP4 + c.IP4InIP6 + c.GUEIP4 + c.GUEIP6
}

// field returns the field counting idx, or nil for an index it does not
// know (the program gained a counter this code has not).
func (c *Counters) field(idx decapbpf.DecapCounter) *uint64 {
	switch idx {
	case decapbpf.DecapCounterCOUNTER_IP4IN_IP4:
		return &c.IP4InIP4
	case decapbpf.DecapCounterCOUNTER_IP6IN_IP6:
		return &c.IP6InIP6
	case decapbpf.DecapCounterCOUNTER_IP6IN_IP4:
		return &c.IP6InIP4
	case decapbpf.DecapCounterCOUNTER_IP4IN_IP6:
		return &c.IP4InIP6
	case decapbpf.DecapCounterCOUNTER_GUE_IP4:
		return &c.GUEIP4
	case decapbpf.DecapCounterCOUNTER_GUE_IP6:
		return &c.GUEIP6
	case decapbpf.DecapCounterCOUNTER_PASSED:
		return &c.Passed
	case decapbpf.DecapCounterCOUNTER_NOT_LOCAL:
		return &c.NotLocal
	case decapbpf.DecapCounterCOUNTER_FRAGMENT:
		return &c.Fragments
	case decapbpf.DecapCounterCOUNTER_MALFORMED:
		return &c.Malformed
	default:
		return nil
	}
}

// Program returns the loaded program, for callers that attach it
// themselves (through pinned links).
func (d *Decap) Program() *ebpf.Program { return d.objs.Decap }

// Stats returns the counters summed over all CPUs.
func (d *Decap) Stats() (Counters, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return Counters{}, ErrClosed
	}
	return readCounters(d.objs.DecapCounters)
}

// PinnedStats reads the counters of maps pinned under dir (Options.PinPath).
func PinnedStats(dir string) (Counters, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, "decap_counters"), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return Counters{}, fmt.Errorf("open pinned decap counters (is the decapsulation program installed?): %w", err)
	}
	defer func() { _ = m.Close() }()
	return readCounters(m)
}

func readCounters(m *ebpf.Map) (Counters, error) {
	var c Counters
	var perCPU []uint64
	for idx := range decapbpf.DecapCounterCOUNTER_MAX {
		if err := m.Lookup(uint32(idx), &perCPU); err != nil {
			return Counters{}, fmt.Errorf("read counter %d: %w", idx, err)
		}
		f := c.field(idx)
		if f == nil {
			continue
		}
		for _, n := range perCPU {
			*f += n
		}
	}
	return c, nil
}
