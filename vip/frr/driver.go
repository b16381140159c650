package frr

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Defaults of the options left zero.
const (
	DefaultSocketDir   = "/var/run/frr"
	DefaultVtysh       = "/usr/bin/vtysh"
	DefaultLoopback    = "lo"
	DefaultGracePeriod = 120 * time.Second
	DefaultInterval    = 30 * time.Second
)

// ErrClosed is returned by the methods of a closed Driver.
var ErrClosed = errors.New("frr driver closed")

// Options configure a Driver.
type Options struct {
	// SocketDir holds the daemons' vty sockets (vtysh --vty_socket).
	// Empty means DefaultSocketDir.
	SocketDir string
	// Vtysh is the vtysh program. Empty means DefaultVtysh.
	Vtysh string
	// Loopback is the interface the VIPs are bound on. Empty means "lo".
	Loopback string
	// GracePeriod is the OSPF graceful restart period (1s-1800s), for
	// Desired.GracefulRestart. Zero means DefaultGracePeriod.
	GracePeriod time.Duration
	// Interval between periodic reconciles in Run. Zero means
	// DefaultInterval.
	Interval time.Duration
	// StateFile records the lines the driver wrote, so that a restarted
	// agent still knows which lines are its own. Empty keeps them in
	// memory only: after a restart, lines written before are left alone
	// (as someone else's) rather than removed.
	StateFile string
	// CheckHellos reads the neighbours' OSPF packets on every uplink to
	// explain missing adjacencies (authentication, area and timer
	// mismatches), which FRR neither counts nor logs without debugging.
	// It needs CAP_NET_RAW.
	CheckHellos bool
	// NetNS is the path of the network namespace FRR's interfaces are in,
	// for CheckHellos. Empty means the process's.
	NetNS string
	// Now is the clock for state timestamps and for how long a Hello
	// observation stays current. Nil means time.Now.
	Now func() time.Time
	// Logger receives the driver's messages. Nil discards them.
	Logger *slog.Logger
}

// Driver writes the OSPF configuration of the desired state into FRR and
// reads back its state. Its methods are safe for concurrent use; reconciles
// run one at a time.
type Driver struct {
	opts Options
	log  *slog.Logger

	trigger chan struct{}

	// mu guards desired and the results of the last reconcile.
	mu        sync.Mutex
	desired   Desired
	closed    bool
	lastErr   error
	lastAt    time.Time
	reapplied int

	// rmu serialises reconciles and guards owned and hellos.
	rmu    sync.Mutex
	owned  map[string]line
	hellos *helloChecker
}

// New returns a driver with nothing desired. It loads Options.StateFile
// when it exists; it does not touch FRR until the first reconcile.
func New(opts Options) (*Driver, error) {
	opts.SocketDir = cmp.Or(opts.SocketDir, DefaultSocketDir)
	opts.Vtysh = cmp.Or(opts.Vtysh, DefaultVtysh)
	opts.Loopback = cmp.Or(opts.Loopback, DefaultLoopback)
	opts.GracePeriod = cmp.Or(opts.GracePeriod, DefaultGracePeriod)
	opts.Interval = cmp.Or(opts.Interval, DefaultInterval)
	if opts.GracePeriod < time.Second || opts.GracePeriod > 1800*time.Second {
		return nil, fmt.Errorf("grace period %v: must be 1s-1800s", opts.GracePeriod)
	}
	if opts.Interval < 0 {
		return nil, fmt.Errorf("interval %v: negative", opts.Interval)
	}
	if !validIfname(opts.Loopback) {
		return nil, fmt.Errorf("loopback %q: not an interface name", opts.Loopback)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	l := opts.Logger
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	d := &Driver{opts: opts, log: l, trigger: make(chan struct{}, 1), owned: map[string]line{}}
	if err := d.load(); err != nil {
		return nil, err
	}
	d.hellos = newHelloChecker(opts.NetNS, opts.Now, l)
	d.hellos.enabled = opts.CheckHellos
	return d, nil
}

// SetDesired replaces the desired state and triggers a reconcile. An
// invalid state is refused, and the previous one stays.
func (d *Driver) SetDesired(des Desired) error {
	if err := des.check(); err != nil {
		return fmt.Errorf("desired ospf state: %w", err)
	}
	des = cloneDesired(des)
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return ErrClosed
	}
	d.desired = des
	d.mu.Unlock()
	d.Trigger()
	return nil
}

func cloneDesired(des Desired) Desired {
	des.Uplinks = slices.Clone(des.Uplinks)
	for i, u := range des.Uplinks {
		if u.BFD != nil {
			b := *u.BFD
			des.Uplinks[i].BFD = &b
		}
	}
	des.VIPs = slices.Clone(des.VIPs)
	return des
}

// Trigger asks Run for a reconcile now.
func (d *Driver) Trigger() {
	select {
	case d.trigger <- struct{}{}:
	default:
	}
}

// Run reconciles on every trigger and every Options.Interval until ctx
// ends. Errors are recorded in State and logged.
func (d *Driver) Run(ctx context.Context) {
	t := time.NewTicker(d.opts.Interval)
	defer t.Stop()
	for {
		if err := d.Reconcile(ctx); err != nil && ctx.Err() == nil {
			d.log.Warn("ospf reconcile", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-d.trigger:
		}
	}
}

// Reconcile brings FRR to the desired state now: it reads the running
// configuration, writes the desired lines that are missing (again, after
// FRR lost them), removes the driver's lines that are no longer desired,
// in one vtysh batch, and checks the result. The error names every line
// that could not be applied and every conflict with lines someone else
// wrote.
func (d *Driver) Reconcile(ctx context.Context) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return ErrClosed
	}
	des := d.desired
	d.mu.Unlock()
	d.rmu.Lock()
	defer d.rmu.Unlock()
	n, err := d.reconcile(ctx, des)
	d.mu.Lock()
	d.lastErr, d.lastAt = err, d.opts.Now()
	d.reapplied += n
	d.mu.Unlock()
	return err
}

// reconcile returns how many lines it wrote that the driver had written
// before (lost by FRR, e.g. after a restart of ospfd).
func (d *Driver) reconcile(ctx context.Context, des Desired) (int, error) {
	lines := render(des, d.opts.Loopback, d.opts.GracePeriod)
	if len(lines) == 0 && len(d.owned) == 0 {
		d.hellos.set(nil, netipZero)
		return 0, nil
	}
	if err := d.checkDaemons(des); err != nil {
		return 0, err
	}
	r, err := d.running(ctx)
	if err != nil {
		return 0, err
	}
	p := makePlan(lines, d.owned, r)
	var errs []error
	errs = append(errs, p.conflicts...)
	reapplied := 0
	for _, l := range p.adds {
		if _, ok := d.owned[l.id()]; ok && !l.Block {
			reapplied++
		}
	}
	if cmds := commands(p.ops); len(cmds) > 0 {
		d.log.Info("ospf apply", "commands", redact(cmds))
		if out, err := d.vtysh(ctx, cmds...); err != nil {
			errs = append(errs, fmt.Errorf("apply ospf configuration: %w: %s", err, strings.TrimSpace(out)))
		}
		r, err = d.running(ctx)
		if err != nil {
			return reapplied, errors.Join(append(errs, err)...)
		}
	}
	// What the driver owns is what it wrote and FRR now shows; a removal
	// that failed keeps the line the driver's.
	for _, l := range p.adds {
		if (l.Block && r.blockExists(append(slices.Clone(l.Ctx), l.Text))) || (!l.Block && r.has(l)) {
			d.owned[l.id()] = l
		}
	}
	for _, l := range p.removes {
		if l.Block || !r.has(l) {
			delete(d.owned, l.id())
		}
	}
	if err := d.save(); err != nil {
		errs = append(errs, err)
	}
	for _, l := range lines {
		ok := r.has(l)
		if l.Block {
			ok = r.blockExists(append(slices.Clone(l.Ctx), l.Text))
		}
		if !ok && !p.blocked[l.id()] {
			errs = append(errs, fmt.Errorf("%s: not in FRR's running configuration after applying it", l))
		}
	}
	if len(lines) > 0 {
		if err := d.checkRouterID(ctx, des); err != nil {
			errs = append(errs, err)
		}
	}
	d.hellos.set(des.Uplinks, des.RouterID)
	return reapplied, errors.Join(errs...)
}

// checkDaemons fails early, naming the daemon, when one the desired state
// needs is not running: vtysh would only say "Unknown command".
func (d *Driver) checkDaemons(des Desired) error {
	need := []string{"zebra", "ospfd"}
	for i, u := range des.Uplinks {
		if u.BFD != nil {
			if !d.hasSocket("bfdd") {
				return fmt.Errorf("uplinks[%d].bfd (%s): FRR's bfdd is not running (no bfdd.vty in %s): start bfdd, the node's BFD speaker while FRR runs", i, u.Interface, d.opts.SocketDir)
			}
			break
		}
	}
	for _, n := range need {
		if !d.hasSocket(n) {
			return fmt.Errorf("FRR's %s is not running (no %s.vty in %s)", n, n, d.opts.SocketDir)
		}
	}
	return nil
}

func (d *Driver) hasSocket(daemon string) bool {
	_, err := os.Stat(filepath.Join(d.opts.SocketDir, daemon+".vty"))
	return err == nil
}

// checkRouterID restarts the OSPF process when FRR kept an old router ID:
// ospfd applies a new one only then while it has adjacencies.
func (d *Driver) checkRouterID(ctx context.Context, des Desired) error {
	var st struct {
		RouterID string `json:"routerId"`
	}
	out, err := d.vtysh(ctx, "show ip ospf json")
	if err != nil {
		return fmt.Errorf("show ip ospf json: %w: %s", err, strings.TrimSpace(out))
	}
	if strings.TrimSpace(out) == "" {
		return nil // no OSPF instance (yet)
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return err
	}
	if st.RouterID == "" || st.RouterID == des.RouterID.String() {
		return nil
	}
	d.log.Info("ospf router id changed: restarting the OSPF process", "from", st.RouterID, "to", des.RouterID)
	if out, err := d.vtysh(ctx, "clear ip ospf process"); err != nil {
		return fmt.Errorf("clear ip ospf process for router id %s: %w: %s", des.RouterID, err, out)
	}
	return nil
}

// Release removes every line the driver wrote, whatever is desired, and
// forgets the desired state. It is the explicit uninstall; an agent that
// stops or restarts leaves FRR as it is.
func (d *Driver) Release(ctx context.Context) error {
	d.mu.Lock()
	d.desired = Desired{}
	d.mu.Unlock()
	return d.Reconcile(ctx)
}

// PrepareRestart asks ospfd to originate grace LSAs before a planned
// restart of FRR (graceful-restart prepare ip ospf), so that the routers
// keep forwarding to this node for the grace period.
func (d *Driver) PrepareRestart(ctx context.Context) error {
	if out, err := d.vtysh(ctx, "graceful-restart prepare ip ospf"); err != nil {
		return fmt.Errorf("graceful-restart prepare ip ospf: %w: %s", err, out)
	}
	return nil
}

// Close stops the Hello checks. FRR's configuration stays as it is.
func (d *Driver) Close() error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.rmu.Lock()
	defer d.rmu.Unlock()
	d.hellos.set(nil, netipZero)
	return nil
}

func (d *Driver) vtysh(ctx context.Context, cmds ...string) (string, error) {
	return runVtysh(ctx, d.opts.Vtysh, d.opts.SocketDir, cmds...)
}

// runVtysh runs vtysh against the daemons in socketDir with one -c per
// command and returns its combined output.
func runVtysh(ctx context.Context, vtysh, socketDir string, cmds ...string) (string, error) {
	args := []string{"--vty_socket", socketDir}
	for _, c := range cmds {
		args = append(args, "-c", c)
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, vtysh, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func (d *Driver) running(ctx context.Context) (*running, error) {
	out, err := d.vtysh(ctx, "show running-config")
	if err != nil {
		return nil, fmt.Errorf("read FRR's running configuration: %w: %s", err, strings.TrimSpace(out))
	}
	return parseRunning(out), nil
}

func (d *Driver) showJSON(ctx context.Context, cmd string, v any) error {
	out, err := d.vtysh(ctx, cmd)
	if err != nil {
		return fmt.Errorf("%s: %w: %s", cmd, err, strings.TrimSpace(out))
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		return fmt.Errorf("%s: decode: %w", cmd, err)
	}
	return nil
}

// redact hides md5 keys from logs.
func redact(cmds []string) []string {
	out := slices.Clone(cmds)
	for i, c := range out {
		if strings.HasPrefix(c, "ip ospf message-digest-key ") || strings.HasPrefix(c, "no ip ospf message-digest-key ") {
			f := strings.Fields(c)
			f[len(f)-1] = "<redacted>"
			out[i] = strings.Join(f, " ")
		}
	}
	return out
}

// stateFile is the on-disk record of the lines the driver owns.
type stateFile struct {
	Lines []line `json:"lines"`
}

func (d *Driver) load() error {
	if d.opts.StateFile == "" {
		return nil
	}
	b, err := os.ReadFile(d.opts.StateFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read state file: %w", err)
	}
	var s stateFile
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("state file %s: %w", d.opts.StateFile, err)
	}
	for _, l := range s.Lines {
		d.owned[l.id()] = l
	}
	return nil
}

func (d *Driver) save() error {
	if d.opts.StateFile == "" {
		return nil
	}
	s := stateFile{Lines: slices.Collect(func(yield func(line) bool) {
		for _, l := range d.owned {
			if !yield(l) {
				return
			}
		}
	})}
	slices.SortFunc(s.Lines, func(a, b line) int { return strings.Compare(a.id(), b.id()) })
	b, err := json.MarshalIndent(s, "", " ")
	if err != nil {
		return err
	}
	// The file holds md5 keys: readable by root only.
	tmp := d.opts.StateFile + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write state file: %w", err)
	}
	if err := os.Rename(tmp, d.opts.StateFile); err != nil {
		return fmt.Errorf("write state file: %w", err)
	}
	return nil
}
