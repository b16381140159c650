package attach

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
)

// ErrBusy is returned (wrapped) by Adopt when an interface already runs an
// XDP program that is not pinned under the root: another tool's program,
// which this package never replaces.
var ErrBusy = errors.New("interface already has an xdp program not managed here")

// Options configure an Attacher.
type Options struct {
	// Root is the directory pins live under. "" means DefaultRoot. When the
	// root is not on a bpffs, Adopt mounts one (at /sys/fs/bpf for a root
	// below it, else at the root itself).
	Root string
	// LayoutVersion names the pin layout in use; links are pinned under
	// <Root>/<LayoutVersion>/links/. "" means DefaultLayoutVersion.
	LayoutVersion string
	// Mode is the requested XDP mode. The zero value, ModeAuto, tries native
	// mode and falls back to generic mode.
	Mode Mode
	// Logger receives a line per interface attached, updated or detached.
	// Nil discards them.
	Logger *slog.Logger
}

// Attacher attaches one XDP program to interfaces and keeps the handles of
// its links. Closing it leaves the program attached; only Detach removes it.
// Its methods may be called from several goroutines, but each acts in the
// network namespace of its calling thread.
type Attacher struct {
	root    string
	version string
	mode    Mode
	log     *slog.Logger

	mu    sync.Mutex
	links map[string]link.Link // by interface name
}

// New returns an Attacher for opts. It touches neither the kernel nor the
// filesystem.
func New(opts Options) (*Attacher, error) {
	a := &Attacher{
		root:    opts.Root,
		version: opts.LayoutVersion,
		mode:    opts.Mode,
		log:     opts.Logger,
		links:   map[string]link.Link{},
	}
	if a.root == "" {
		a.root = DefaultRoot
	}
	a.root = filepath.Clean(a.root)
	if !filepath.IsAbs(a.root) {
		return nil, fmt.Errorf("pin root %q must be an absolute path", opts.Root)
	}
	if a.version == "" {
		a.version = DefaultLayoutVersion
	}
	if err := validName("layout version", a.version); err != nil {
		return nil, err
	}
	switch a.mode {
	case ModeAuto, ModeNative, ModeGeneric:
	default:
		return nil, fmt.Errorf("invalid xdp mode %d", int(a.mode))
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	return a, nil
}

// Root returns the pin root, for List and DetachAll.
func (a *Attacher) Root() string { return a.root }

// PinPath returns where the link of ifname is pinned in this Attacher's
// layout version.
func (a *Attacher) PinPath(ifname string) string {
	return pinPath(a.root, a.version, ifname)
}

// Action says what Adopt did on an interface.
type Action int

const (
	// ActionAttached means no pin existed: the program was attached and
	// the new link pinned.
	ActionAttached Action = iota + 1
	// ActionUpdated means a live pinned link was found and the program
	// replaced in it atomically: no packet went without a program.
	ActionUpdated
	// ActionMigrated is ActionUpdated for a link pinned under another
	// layout version; its pin was moved into the current one.
	ActionMigrated
	// ActionReplacedStale means the pinned link was dead (its interface
	// was deleted or recreated): the pin was removed and the program
	// attached anew.
	ActionReplacedStale
	// ActionReattached means the pinned link could not be kept: it ran in
	// another mode than the one explicitly requested, or the kernel refused
	// to swap the program in. It was detached and the program attached
	// anew, leaving the interface without a program between the two steps;
	// Outcome.ReattachCause says why.
	ActionReattached
)

// String returns the action in words, for logs.
func (a Action) String() string {
	switch a {
	case ActionAttached:
		return "attached"
	case ActionUpdated:
		return "updated"
	case ActionMigrated:
		return "migrated"
	case ActionReplacedStale:
		return "replaced-stale"
	case ActionReattached:
		return "reattached"
	default:
		return fmt.Sprintf("action(%d)", int(a))
	}
}

// Outcome is what Adopt did on one interface.
type Outcome struct {
	// Target is the interface, as resolved.
	Target Target
	// Action is what happened.
	Action Action
	// Mode is the mode in effect, as netlink reports it.
	Mode Mode
	// Fallback is the error native mode failed with when ModeAuto fell back
	// to generic mode; nil otherwise.
	Fallback error
	// ReattachCause says why ActionReattached replaced the pinned link;
	// nil for the other actions.
	ReattachCause error
	// LinkID identifies the BPF link; an update keeps the ID.
	LinkID link.ID
	// Pin is the path the link is pinned at.
	Pin string
}

// Result is what Adopt did.
type Result struct {
	// Interfaces has one entry per target that now runs the program, in the
	// order of the targets.
	Interfaces []Outcome
	// Unrequested lists links pinned under the root, in any layout version,
	// for interfaces that were not among the targets. Adopt leaves them
	// attached; the caller decides whether to Detach them.
	Unrequested []Pin
}

// Adopt makes prog the program on every target. Where a live link is pinned
// for the interface it replaces the program in that link (BPF_LINK_UPDATE),
// so traffic never meets an interface without a program; otherwise it
// attaches a new link and pins it. A target that fails does not stop the
// others: the error joins every failure and Result holds the successes.
func (a *Attacher) Adopt(prog *ebpf.Program, targets []Target) (*Result, error) {
	if prog == nil {
		return nil, errors.New("adopt xdp: nil program")
	}
	if prog.Type() != ebpf.XDP {
		return nil, fmt.Errorf("adopt xdp: program type is %s, not XDP", prog.Type())
	}
	if err := ensureBPFFS(a.root); err != nil {
		return nil, fmt.Errorf("adopt xdp: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(a.root, a.version, linksDir), 0o700); err != nil {
		return nil, fmt.Errorf("adopt xdp: create pin directory: %w", err)
	}

	a.mu.Lock()
	defer a.mu.Unlock()

	res := &Result{}
	var errs []error
	requested := map[string]bool{}
	for _, t := range targets {
		requested[t.Ifname] = true
		out, err := a.adoptOne(prog, t)
		if err != nil {
			errs = append(errs, fmt.Errorf("xdp on %s: %w", t.Ifname, err))
			continue
		}
		res.Interfaces = append(res.Interfaces, out)
	}

	pins, err := scanPins(a.root)
	if err != nil {
		errs = append(errs, err)
	}
	for _, p := range pins {
		if !requested[p.Ifname] {
			res.Unrequested = append(res.Unrequested, p)
		}
	}
	return res, errors.Join(errs...)
}

func (a *Attacher) adoptOne(prog *ebpf.Program, t Target) (Outcome, error) {
	out := Outcome{Target: t, Pin: a.PinPath(t.Ifname)}
	if err := validName("interface name", t.Ifname); err != nil {
		return out, err
	}
	if t.Ifindex <= 0 {
		return out, fmt.Errorf("invalid ifindex %d", t.Ifindex)
	}

	pinned, stale, err := a.pinnedLink(t)
	if err != nil {
		return out, err
	}
	restore := ModeAuto // the mode to fall back to if a reattach fails
	if pinned != nil {
		inEffect, err := modeOn(t.Ifindex)
		if err != nil {
			_ = pinned.link.Close()
			return out, err
		}
		var cause error
		if a.mode == ModeAuto || a.mode == inEffect {
			done, refused, err := a.update(prog, t, pinned, inEffect, out)
			if refused == nil {
				return done, err
			}
			cause = refused
		} else {
			cause = fmt.Errorf("%s mode in effect, %s mode requested", inEffect, a.mode)
		}
		a.log.Warn("replacing the pinned xdp link: the interface runs without a program until the new link is attached",
			"interface", t.Ifname, "cause", cause)
		if err := detachLink(pinned.link); err != nil {
			return out, fmt.Errorf("detach pinned link to replace it (%w): %w", cause, err)
		}
		out.Action, out.ReattachCause, restore = ActionReattached, cause, inEffect
	} else if stale {
		out.Action = ActionReplacedStale
	} else {
		out.Action = ActionAttached
	}

	if err := checkNoForeignProgram(t); err != nil {
		return out, err
	}
	l, fallback, err := a.attachLink(prog, t.Ifindex)
	if err != nil && restore != ModeAuto {
		// The old link is gone already: put the program back in the mode
		// that worked before rather than leave the interface bare.
		l, rerr := link.AttachXDP(link.XDPOptions{Program: prog, Interface: t.Ifindex, Flags: restore.flags()})
		if rerr != nil {
			return out, fmt.Errorf("%w; restoring %s mode failed too, the interface has no xdp program: %w", err, restore, rerr)
		}
		if perr := l.Pin(out.Pin); perr != nil {
			_ = l.Close()
			return out, fmt.Errorf("%w; restored %s mode but could not pin it, the interface has no xdp program: %w", err, restore, perr)
		}
		a.keep(t.Ifname, l)
		return out, fmt.Errorf("%w (the program runs in %s mode again, in a new link)", err, restore)
	}
	if err != nil {
		return out, err
	}
	if err := l.Pin(out.Pin); err != nil {
		// Closing the only reference detaches: an unpinned link would
		// vanish with this process anyway.
		_ = l.Close()
		return out, fmt.Errorf("pin link at %s: %w", out.Pin, err)
	}
	info, err := l.Info()
	if err != nil {
		return out, a.keepAndFail(t.Ifname, l, fmt.Errorf("link info: %w", err))
	}
	mode, err := modeOn(t.Ifindex)
	if err != nil {
		return out, a.keepAndFail(t.Ifname, l, err)
	}
	out.Mode, out.Fallback, out.LinkID = mode, fallback, info.ID
	a.keep(t.Ifname, l)
	a.log.Info("xdp program attached", "interface", t.Ifname, "ifindex", t.Ifindex, "action", out.Action.String(),
		"mode", mode.String(), "link_id", uint32(info.ID), "reason", reasonAttr(t))
	if fallback != nil {
		a.log.Warn("native xdp refused, running in generic mode", "interface", t.Ifname, "error", fallback)
	}
	return out, nil
}

// pinnedLinkOf is a pinned link found for an interface and where.
type pinnedLinkOf struct {
	link link.Link
	pin  Pin
}

// pinnedLink returns the live link pinned for t in any layout version,
// preferring the current one. Pins of t whose link is dead (its interface
// was deleted, or t.Ifname is a new device with another ifindex) are removed
// on the way, detaching such a link if it still sits on some interface;
// stale reports that one was.
func (a *Attacher) pinnedLink(t Target) (*pinnedLinkOf, bool, error) {
	pins, err := pinsFor(a.root, a.version, t.Ifname)
	if err != nil {
		return nil, false, err
	}
	var (
		found *pinnedLinkOf
		stale bool
	)
	for _, p := range pins {
		l, err := link.LoadPinnedLink(p.Path, nil)
		if err != nil {
			a.closeFound(found)
			return nil, false, fmt.Errorf("load pinned link %s: %w", p.Path, err)
		}
		ifindex, err := xdpIfindex(l)
		if err != nil {
			_ = l.Close()
			a.closeFound(found)
			return nil, false, fmt.Errorf("pin %s: %w", p.Path, err)
		}
		if ifindex == t.Ifindex && found == nil {
			found = &pinnedLinkOf{link: l, pin: p}
			continue
		}
		a.log.Info("removing stale xdp link pin", "pin", p.Path, "link_ifindex", ifindex, "interface_ifindex", t.Ifindex)
		if err := detachLink(l); err != nil {
			a.closeFound(found)
			return nil, false, fmt.Errorf("remove stale pin %s: %w", p.Path, err)
		}
		stale = true
	}
	return found, stale, nil
}

func (a *Attacher) closeFound(f *pinnedLinkOf) {
	if f != nil {
		_ = f.link.Close()
	}
}

// update swaps prog into a live pinned link and moves its pin into the
// current layout version if it lives in another. When the kernel refuses the
// swap (a program of another expected attach type or with other XDP flags,
// say) it returns the reason as refused and leaves p open, for the caller to
// replace the link: an old program left running would serve maps the new
// agent no longer fills.
func (a *Attacher) update(prog *ebpf.Program, t Target, p *pinnedLinkOf, mode Mode, out Outcome) (_ Outcome, refused, err error) {
	if err := p.link.Update(prog); err != nil {
		return out, fmt.Errorf("replace program in pinned link %s: %w", p.pin.Path, err), nil
	}
	out.Action = ActionUpdated
	if p.pin.Path != out.Pin {
		// The link stays pinned at the old path on failure, and keeps
		// the new program.
		if err := p.link.Pin(out.Pin); err != nil {
			_ = p.link.Close()
			return out, nil, fmt.Errorf("move pin %s to %s: %w", p.pin.Path, out.Pin, err)
		}
		out.Action = ActionMigrated
	}
	info, err := p.link.Info()
	if err != nil {
		return out, nil, a.keepAndFail(t.Ifname, p.link, fmt.Errorf("link info: %w", err))
	}
	out.Mode, out.LinkID = mode, info.ID
	a.keep(t.Ifname, p.link)
	a.log.Info("xdp program replaced in pinned link", "interface", t.Ifname, "ifindex", t.Ifindex,
		"action", out.Action.String(), "mode", mode.String(), "link_id", uint32(info.ID), "from_pin", p.pin.Path,
		"reason", reasonAttr(t))
	return out, nil, nil
}

// attachLink attaches prog in the requested mode. Under ModeAuto a refused
// native attach is retried in generic mode and its error returned as the
// fallback reason.
func (a *Attacher) attachLink(prog *ebpf.Program, ifindex int) (l link.Link, fallback, err error) {
	if a.mode != ModeAuto {
		l, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: a.mode.flags()})
		if err != nil {
			return nil, nil, fmt.Errorf("attach in %s mode: %w", a.mode, err)
		}
		return l, nil, nil
	}
	l, fallback = link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: link.XDPDriverMode})
	if fallback == nil {
		return l, nil, nil
	}
	l, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: link.XDPGenericMode})
	if err != nil {
		return nil, nil, fmt.Errorf("attach in generic mode: %w (native mode failed first: %w)", err, fallback)
	}
	return l, fallback, nil
}

// keep stores l as the handle for ifname, closing the one it replaces. The
// pin holds the attachment, so closing an old handle detaches nothing.
func (a *Attacher) keep(ifname string, l link.Link) {
	if old := a.links[ifname]; old != nil && old != l {
		_ = old.Close()
	}
	a.links[ifname] = l
}

// keepAndFail keeps l (it is pinned and attached, and Detach will find it)
// and returns err.
func (a *Attacher) keepAndFail(ifname string, l link.Link, err error) error {
	a.keep(ifname, l)
	return err
}

// Detach takes the program off ifname: it detaches and unpins the links
// pinned for ifname in every layout version under the root and closes this
// Attacher's handle, then checks with netlink that the program has left the
// interface. It returns an error wrapping os.ErrNotExist when nothing was
// pinned for ifname.
func (a *Attacher) Detach(ifname string) error {
	if err := validName("interface name", ifname); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()

	held := a.links[ifname]
	delete(a.links, ifname)
	pins, err := pinsFor(a.root, a.version, ifname)
	if err != nil {
		if held != nil {
			_ = held.Close()
		}
		return err
	}
	var errs []error
	for _, p := range pins {
		if err := detachPin(p.Path); err != nil {
			errs = append(errs, err)
			continue
		}
		a.log.Info("xdp program detached", "interface", ifname, "pin", p.Path)
	}
	if held != nil {
		// The pins are gone, so this handle may be the last reference;
		// detach through it too in case its pin was removed behind our back.
		if len(pins) == 0 {
			if err := detachLink(held); err != nil {
				errs = append(errs, fmt.Errorf("detach held link of %s: %w", ifname, err))
			}
		} else {
			_ = held.Close()
		}
	}
	if len(pins) == 0 && held == nil {
		return fmt.Errorf("detach xdp from %s: no link pinned under %s: %w", ifname, a.root, os.ErrNotExist)
	}
	return errors.Join(errs...)
}

// Close closes the Attacher's link handles. The links stay pinned, so the
// program stays on every interface: an agent stopping (SIGTERM) must not
// take the fast path down.
func (a *Attacher) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	for name, l := range a.links {
		if err := l.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close link handle of %s: %w", name, err))
		}
	}
	clear(a.links)
	return errors.Join(errs...)
}

// DetachAll takes the program off every interface pinned under root, in every
// layout version, removes the pins and the directories left empty, and
// returns the pins it removed. This is `novaedgectl fastpath uninstall`.
func DetachAll(root string) ([]Pin, error) {
	pins, err := scanPins(root)
	if err != nil {
		return nil, fmt.Errorf("detach all xdp links: %w", err)
	}
	var (
		done []Pin
		errs []error
	)
	for _, p := range pins {
		if err := detachPin(p.Path); err != nil {
			errs = append(errs, err)
			continue
		}
		done = append(done, p)
	}
	removeEmptyDirs(root)
	return done, errors.Join(errs...)
}

// detachPin detaches the link pinned at path from its interface, removes the
// pin, and verifies with netlink that the program is gone.
func detachPin(path string) error {
	l, err := link.LoadPinnedLink(path, nil)
	if err != nil {
		return fmt.Errorf("load pinned link %s: %w", path, err)
	}
	info, err := l.Info()
	if err != nil {
		_ = l.Close()
		return fmt.Errorf("info of pinned link %s: %w", path, err)
	}
	var ifindex int
	if x := info.XDP(); x != nil {
		ifindex = int(x.Ifindex)
	} else {
		_ = l.Close()
		return fmt.Errorf("pin %s holds a link of type %d, not an xdp link; left alone", path, info.Type)
	}
	if err := detachLink(l); err != nil {
		return fmt.Errorf("detach pinned link %s: %w", path, err)
	}
	return verifyGone(ifindex, info.Program)
}

// detachLink takes l off its interface, removes its pin and closes it.
// BPF_LINK_DETACH acts at once, even while other processes hold the link;
// without it the kernel would release the link only after the last
// reference, which the pin's removal drops asynchronously.
func detachLink(l link.Link) error {
	defer func() { _ = l.Close() }()
	if err := l.Detach(); err != nil && !errors.Is(err, link.ErrNotSupported) {
		return err
	}
	if err := l.Unpin(); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("unpin: %w", err)
	}
	return nil
}

// verifyGone checks that the interface with ifindex (0: none any more) no
// longer runs program prog.
func verifyGone(ifindex int, prog ebpf.ProgramID) error {
	if ifindex == 0 {
		return nil
	}
	nl, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) {
			return nil
		}
		return fmt.Errorf("verify detach on ifindex %d: %w", ifindex, err)
	}
	if x := nl.Attrs().Xdp; x != nil && x.Attached && ebpf.ProgramID(x.ProgId) == prog {
		return fmt.Errorf("xdp program %d is still attached to %s after detach", prog, nl.Attrs().Name)
	}
	return nil
}

// xdpIfindex returns the ifindex an XDP link is attached to, 0 when its
// interface is gone.
func xdpIfindex(l link.Link) (int, error) {
	info, err := l.Info()
	if err != nil {
		return 0, fmt.Errorf("link info: %w", err)
	}
	x := info.XDP()
	if x == nil {
		return 0, fmt.Errorf("holds a link of type %d, not an xdp link", info.Type)
	}
	return int(x.Ifindex), nil
}

// modeOn returns the XDP mode netlink reports for ifindex.
func modeOn(ifindex int) (Mode, error) {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return ModeAuto, fmt.Errorf("read xdp state of ifindex %d: %w", ifindex, err)
	}
	if x := l.Attrs().Xdp; x != nil && x.Attached {
		return modeFromAttached(x.AttachMode), nil
	}
	return ModeAuto, nil
}

// checkNoForeignProgram fails when t already runs an XDP program: every link
// of ours was found through its pin before this, so the program is someone
// else's, and replacing it is not this package's call.
func checkNoForeignProgram(t Target) error {
	l, err := netlink.LinkByIndex(t.Ifindex)
	if err != nil {
		return fmt.Errorf("read xdp state: %w", err)
	}
	if l.Attrs().Name != t.Ifname {
		return fmt.Errorf("ifindex %d is now named %s, not %s: resolve the interfaces again", t.Ifindex, l.Attrs().Name, t.Ifname)
	}
	if x := l.Attrs().Xdp; x != nil && x.Attached {
		return fmt.Errorf("xdp program %d (%s mode): %w", x.ProgId, modeFromAttached(x.AttachMode), ErrBusy)
	}
	return nil
}

func reasonAttr(t Target) string {
	return strings.Join(t.Reasons, "; ")
}
