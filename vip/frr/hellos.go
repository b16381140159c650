package frr

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/novaedge/novaedge/vip/frr/internal/ospfpkt"
	"github.com/novaedge/novaedge/vip/frr/internal/rawsock"
)

var netipZero netip.Addr

// HelloProblem is a mismatch seen in the packets of a neighbour that
// keeps it from becoming adjacent.
type HelloProblem struct {
	Interface string
	// Peer is the neighbour's interface address; RouterID its router ID.
	Peer, RouterID netip.Addr
	// Err says what does not match, e.g. "OSPF authentication mismatch on
	// eth0 with 10.0.0.1: md5 keys differ (key id 1)".
	Err error
	// At is when the last packet showing it arrived.
	At time.Time
}

type helloObs struct {
	routerID netip.Addr
	err      error
	at       time.Time
}

// helloChecker reads the OSPF packets of every uplink (with CheckHellos)
// and keeps what the last packet of each neighbour showed.
type helloChecker struct {
	nsPath string
	now    func() time.Time
	log    *slog.Logger

	mu       sync.Mutex
	enabled  bool
	routerID netip.Addr
	uplinks  map[string]Uplink
	readers  map[string]context.CancelFunc
	openErr  map[string]error
	obs      map[string]map[netip.Addr]helloObs
	wg       sync.WaitGroup
}

func newHelloChecker(nsPath string, now func() time.Time, log *slog.Logger) *helloChecker {
	return &helloChecker{nsPath: nsPath, now: now, log: log, uplinks: map[string]Uplink{},
		readers: map[string]context.CancelFunc{}, openErr: map[string]error{}, obs: map[string]map[netip.Addr]helloObs{}}
}

// set starts reading the uplinks not read yet and stops the others;
// with uplinks nil it stops them all and waits for the readers to end.
func (h *helloChecker) set(uplinks []Uplink, routerID netip.Addr) {
	h.mu.Lock()
	h.routerID = routerID
	want := map[string]Uplink{}
	if h.enabled {
		for _, u := range uplinks {
			want[u.Interface] = u
		}
	}
	h.uplinks = want
	for name, stop := range h.readers {
		if _, ok := want[name]; !ok {
			stop()
			delete(h.readers, name)
			delete(h.obs, name)
		}
	}
	for name := range h.openErr {
		if _, ok := want[name]; !ok {
			delete(h.openErr, name)
		}
	}
	var start []string
	for name := range want {
		if h.readers[name] == nil {
			start = append(start, name)
		}
	}
	h.mu.Unlock()
	for _, name := range start {
		c, err := rawsock.ListenOSPF(h.nsPath, name)
		h.mu.Lock()
		if err != nil {
			// Retried on the next reconcile: the interface may come later.
			h.openErr[name] = fmt.Errorf("check ospf packets on %s: %w", name, err)
			h.mu.Unlock()
			continue
		}
		delete(h.openErr, name)
		ctx, cancel := context.WithCancel(context.Background())
		h.readers[name] = cancel
		h.wg.Add(1)
		go h.read(ctx, name, c)
		h.mu.Unlock()
	}
	if len(uplinks) == 0 {
		h.wg.Wait()
	}
}

func (h *helloChecker) read(ctx context.Context, ifname string, c *rawsock.Conn) {
	defer h.wg.Done()
	defer func() { _ = c.Close() }()
	buf := make([]byte, 65536)
	for {
		b, src, err := c.Read(ctx, buf)
		if err != nil {
			if ctx.Err() == nil {
				h.log.Warn("read ospf packets", "interface", ifname, "error", err)
			}
			return
		}
		p, err := ospfpkt.Parse(b)
		if err != nil {
			continue
		}
		h.mu.Lock()
		u, ok := h.uplinks[ifname]
		if ok && p.RouterID != h.routerID {
			if h.obs[ifname] == nil {
				h.obs[ifname] = map[netip.Addr]helloObs{}
			}
			h.obs[ifname][src] = helloObs{routerID: p.RouterID, err: checkPacket(u, src, p), at: h.now()}
		}
		h.mu.Unlock()
	}
}

// checkPacket compares a neighbour's packet with the uplink's settings,
// authentication first: nothing else in a packet that fails it counts.
func checkPacket(u Uplink, src netip.Addr, p ospfpkt.Packet) error {
	authErr := func(format string, args ...any) error {
		return fmt.Errorf("OSPF authentication mismatch on %s with %s: %s", u.Interface, src, fmt.Sprintf(format, args...))
	}
	id := max(u.Auth.KeyID, 1)
	switch {
	case u.Auth.Key != "" && p.AuthType == ospfpkt.AuthNull:
		return authErr("the neighbour sends no authentication, this node md5 (key id %d)", id)
	case u.Auth.Key != "" && p.AuthType == ospfpkt.AuthSimple:
		return authErr("the neighbour uses simple password authentication, this node md5 (key id %d)", id)
	case u.Auth.Key != "" && p.AuthType == ospfpkt.AuthCryptographic && p.KeyID != id:
		return authErr("the neighbour signs with md5 key id %d, this node with key id %d", p.KeyID, id)
	case u.Auth.Key != "" && p.AuthType == ospfpkt.AuthCryptographic && !p.VerifyMD5(u.Auth.Key):
		return authErr("the md5 keys differ (key id %d)", id)
	case u.Auth.Key != "" && p.AuthType != ospfpkt.AuthCryptographic:
		return authErr("the neighbour uses authentication type %d, this node md5", p.AuthType)
	case u.Auth.Key == "" && p.AuthType == ospfpkt.AuthCryptographic:
		return authErr("the neighbour uses md5 (key id %d), this node no authentication", p.KeyID)
	case u.Auth.Key == "" && p.AuthType != ospfpkt.AuthNull:
		return authErr("the neighbour uses authentication type %d, this node none", p.AuthType)
	}
	if p.Type != ospfpkt.TypeHello {
		return nil
	}
	hello, err := ospfpkt.ParseHello(p.Body)
	if err != nil {
		return nil
	}
	if a := p.Area.String(); a != u.Area {
		return fmt.Errorf("OSPF area mismatch on %s with %s: the neighbour is in area %s, this node's uplink in %s", u.Interface, src, a, u.Area)
	}
	helloS := cmp.Or(u.HelloInterval, 10)
	if uint32(hello.HelloInterval) != helloS {
		return fmt.Errorf("OSPF hello interval mismatch on %s with %s: the neighbour's is %ds, this node's %ds", u.Interface, src, hello.HelloInterval, helloS)
	}
	if dead := cmp.Or(u.DeadInterval, 4*helloS); hello.DeadInterval != dead {
		return fmt.Errorf("OSPF dead interval mismatch on %s with %s: the neighbour's is %ds, this node's %ds", u.Interface, src, hello.DeadInterval, dead)
	}
	return nil
}

// problems returns the mismatches of neighbours heard within their
// uplink's dead interval, and the uplinks that could not be read.
func (h *helloChecker) problems() ([]HelloProblem, []error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	var out []HelloProblem
	for _, name := range slices.Sorted(maps.Keys(h.obs)) {
		u := h.uplinks[name]
		fresh := time.Duration(cmp.Or(u.DeadInterval, 4*cmp.Or(u.HelloInterval, 10))) * time.Second
		for _, src := range slices.SortedFunc(maps.Keys(h.obs[name]), netip.Addr.Compare) {
			o := h.obs[name][src]
			if o.err == nil || now.Sub(o.at) > fresh {
				continue
			}
			out = append(out, HelloProblem{Interface: name, Peer: src, RouterID: o.routerID, Err: o.err, At: o.at})
		}
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(h.openErr)) {
		errs = append(errs, h.openErr[name])
	}
	return out, errs
}
