package frr

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// line is one configuration line the driver writes.
type line struct {
	// Ctx is the path of blocks the line sits in, outermost first:
	// nil (top level), ["router ospf"], ["interface lo"], ["bfd",
	// "profile novaedge-eth0"].
	Ctx []string `json:"ctx,omitempty"`
	// Text is the command, as FRR shows it in its running configuration.
	Text string `json:"text"`
	// Key is the pattern of the lines that set the same thing: words, "*"
	// for any one word, a final "..." for any rest. Empty means Text.
	Key string `json:"key,omitempty"`
	// Block marks a block opener (Text is e.g. "router ospf") that the
	// driver created and removes when it no longer needs it.
	Block bool `json:"block,omitempty"`
}

func (l line) id() string {
	b := "L"
	if l.Block {
		b = "B"
	}
	return b + ctxKey(l.Ctx) + "\x00" + l.Text
}

func ctxKey(ctx []string) string { return strings.Join(ctx, "\x01") }

// String shows the line with its blocks, for errors.
func (l line) String() string {
	if len(l.Ctx) == 0 {
		return fmt.Sprintf("%q", l.Text)
	}
	return fmt.Sprintf("%s: %q", strings.Join(l.Ctx, " / "), l.Text)
}

// removable reports whether the driver may remove a block it created:
// interface blocks belong to zebra and stay.
func removableBlock(text string) bool {
	return text == "router ospf" || text == "bfd" || strings.HasPrefix(text, "profile ")
}

// matches reports whether text is set by the same command as key.
func matches(key, text string) bool {
	kw, tw := strings.Fields(key), strings.Fields(text)
	for i, k := range kw {
		if k == "..." && i == len(kw)-1 {
			return true
		}
		if i >= len(tw) || (k != "*" && k != tw[i]) {
			return false
		}
	}
	return len(kw) == len(tw)
}

const (
	ctxRouter = "router ospf"
	ctxBFD    = "bfd"
)

// bfdProfile names the BFD profile the driver writes for an uplink.
func bfdProfile(ifname string) string { return "novaedge-" + ifname }

// render turns the desired state into the lines to write, in the order to
// write them: the router first, then the BFD profiles the uplinks refer
// to, the uplinks, the VIPs. Values FRR does not show because they are its
// defaults are not written, so that what is written is what FRR shows.
func render(d Desired, loopback string, gracePeriod time.Duration) []line {
	if len(d.Uplinks) == 0 && len(d.VIPs) == 0 {
		return nil
	}
	var out []line
	add := func(ctx []string, text, key string) {
		out = append(out, line{Ctx: ctx, Text: text, Key: key})
	}
	router := []string{ctxRouter}
	add(router, "ospf router-id "+d.RouterID.String(), "ospf router-id *")
	if d.GracefulRestart {
		gr := "graceful-restart"
		if p := int(gracePeriod / time.Second); p != 120 {
			gr = fmt.Sprintf("graceful-restart grace-period %d", p)
		}
		add(router, gr, "graceful-restart ...")
	}
	for _, u := range d.Uplinks {
		b := u.BFD
		if b == nil {
			continue
		}
		prof := []string{ctxBFD, "profile " + bfdProfile(u.Interface)}
		// The block first: a profile with only defaults is shown as its
		// block alone.
		out = append(out, line{Ctx: prof[:1], Text: prof[1], Block: true})
		if m := b.DetectMultiplier; m != 0 && m != 3 {
			add(prof, fmt.Sprintf("detect-multiplier %d", m), "detect-multiplier *")
		}
		if ms := b.MinRx.Milliseconds(); ms != 0 && ms != 300 {
			add(prof, fmt.Sprintf("receive-interval %d", ms), "receive-interval *")
		}
		if ms := b.MinTx.Milliseconds(); ms != 0 && ms != 300 {
			add(prof, fmt.Sprintf("transmit-interval %d", ms), "transmit-interval *")
		}
		if b.EchoMode {
			add(prof, "echo-mode", "")
		}
	}
	for _, u := range d.Uplinks {
		ifc := []string{"interface " + u.Interface}
		// Timers and authentication before the area: ospfd starts the
		// interface (and its wait timer, from the dead interval) when the
		// area line arrives, so settings written after it would first run
		// with the defaults (a 40 s wait before the first adjacency).
		if u.HelloInterval != 0 && u.HelloInterval != 10 {
			add(ifc, fmt.Sprintf("ip ospf hello-interval %d", u.HelloInterval), "ip ospf hello-interval *")
		}
		if u.DeadInterval != 0 {
			add(ifc, fmt.Sprintf("ip ospf dead-interval %d", u.DeadInterval), "ip ospf dead-interval ...")
		}
		if u.Auth.Key != "" {
			id := max(u.Auth.KeyID, 1)
			add(ifc, "ip ospf authentication message-digest", "ip ospf authentication ...")
			add(ifc, fmt.Sprintf("ip ospf message-digest-key %d md5 %s", id, u.Auth.Key), fmt.Sprintf("ip ospf message-digest-key %d ...", id))
		}
		if u.BFD != nil {
			add(ifc, "ip ospf bfd", "")
			add(ifc, "ip ospf bfd profile "+bfdProfile(u.Interface), "ip ospf bfd profile *")
		}
		add(ifc, "ip ospf area "+u.Area, "ip ospf area *")
	}
	lo := []string{"interface " + loopback}
	for _, v := range d.VIPs {
		a := v.Address.String()
		add(lo, fmt.Sprintf("ip ospf area %s %s", v.Area, a), "ip ospf area * "+a)
		add(lo, fmt.Sprintf("ip ospf cost %d %s", v.cost(), a), "ip ospf cost * "+a)
	}
	return out
}

// running is FRR's running configuration, parsed into blocks.
type running struct {
	// lines maps a block path (ctxKey) to the lines directly inside it.
	lines map[string][]string
}

// parseRunning parses the text of `show running-config`: a block's lines
// are indented one space deeper than its opener, and "exit" at the
// opener's depth closes it.
func parseRunning(text string) *running {
	r := &running{lines: map[string][]string{}}
	var stack []string
	for _, raw := range strings.Split(text, "\n") {
		s := strings.TrimRight(raw, " \r")
		t := strings.TrimLeft(s, " ")
		depth := len(s) - len(t)
		if t == "" || t == "!" || strings.HasPrefix(t, "Building configuration") || strings.HasPrefix(t, "Current configuration") || t == "end" {
			continue
		}
		if depth > len(stack) {
			// Deeper than any open block: keep it under the last line.
			depth = len(stack)
		}
		stack = stack[:depth]
		if t == "exit" || t == "exit-address-family" || t == "exit-vrf" {
			continue
		}
		r.lines[ctxKey(stack)] = append(r.lines[ctxKey(stack)], t)
		stack = append(stack, t)
	}
	return r
}

// has reports whether the line is in the configuration.
func (r *running) has(l line) bool {
	return slices.Contains(r.lines[ctxKey(l.Ctx)], l.Text)
}

// blockExists reports whether the block at path ctx is open in the
// configuration (the top level always is).
func (r *running) blockExists(ctx []string) bool {
	if len(ctx) == 0 {
		return true
	}
	return slices.Contains(r.lines[ctxKey(ctx[:len(ctx)-1])], ctx[len(ctx)-1])
}

// inside returns the lines directly inside the block at ctx.
func (r *running) inside(ctx []string) []string { return r.lines[ctxKey(ctx)] }

// op is one command of a batch, run inside the block at Ctx.
type op struct {
	Ctx []string
	Cmd string
}

// plan is what one reconcile applies.
type plan struct {
	ops []op
	// adds are the lines (and blocks) written, removes those removed.
	adds, removes []line
	// conflicts are desired lines blocked by a line someone else wrote;
	// blocked holds their ids.
	conflicts []error
	blocked   map[string]bool
}

// makePlan compares the desired lines with the running configuration and
// the lines the driver owns. A desired line that is running is left
// alone; one that is missing is written, after removing the driver's own
// lines that set the same thing differently; a line someone else wrote
// that sets it differently blocks it (a conflict, reported). Owned lines
// no longer desired are removed when running, last written first, and
// owned blocks no longer needed go when nobody else wrote into them.
func makePlan(desired []line, owned map[string]line, r *running) plan {
	p := plan{blocked: map[string]bool{}}
	want := map[string]bool{}
	blocksAdded := map[string]bool{}
	for _, l := range desired {
		want[l.id()] = true
		// Blocks the line needs that do not exist yet become the driver's.
		for i := range l.Ctx {
			b := line{Ctx: l.Ctx[:i], Text: l.Ctx[i], Block: true}
			if _, ok := owned[b.id()]; ok {
				want[b.id()] = true
			}
			if removableBlock(b.Text) && !r.blockExists(l.Ctx[:i+1]) && !blocksAdded[b.id()] {
				blocksAdded[b.id()] = true
				want[b.id()] = true
				p.adds = append(p.adds, b)
			}
		}
		if l.Block {
			path := append(slices.Clone(l.Ctx), l.Text)
			if _, ok := owned[l.id()]; ok || !r.blockExists(path) {
				want[l.id()] = true
			}
			if !r.blockExists(path) && !blocksAdded[l.id()] {
				blocksAdded[l.id()] = true
				p.adds = append(p.adds, l)
				p.ops = append(p.ops, op{Ctx: path})
			}
			continue
		}
		if r.has(l) {
			continue
		}
		key := l.Key
		if key == "" {
			key = l.Text
		}
		var replace []string
		blocked := ""
		for _, t := range r.inside(l.Ctx) {
			if !matches(key, t) {
				continue
			}
			if _, ours := owned[line{Ctx: l.Ctx, Text: t}.id()]; ours {
				replace = append(replace, t)
			} else {
				blocked = t
			}
		}
		if blocked != "" {
			p.blocked[l.id()] = true
			p.conflicts = append(p.conflicts, fmt.Errorf("%s: %q was not written by NovaEdge and differs from the desired %q: left in place, the desired setting is not applied", ctxName(l.Ctx), blocked, l.Text))
			continue
		}
		for _, t := range replace {
			old := line{Ctx: l.Ctx, Text: t}
			p.ops = append(p.ops, op{Ctx: l.Ctx, Cmd: "no " + t})
			p.removes = append(p.removes, old)
		}
		p.ops = append(p.ops, op{Ctx: l.Ctx, Cmd: l.Text})
		p.adds = append(p.adds, l)
	}
	// Owned lines no longer desired, newest first: settings before the
	// area that enables OSPF on an interface, lines before their blocks.
	var gone []line
	for id, l := range owned {
		if !want[id] && !slices.ContainsFunc(p.removes, func(x line) bool { return x.id() == id }) {
			gone = append(gone, l)
		}
	}
	slices.SortFunc(gone, func(a, b line) int {
		// Deeper first, then blocks after lines, then reverse text order
		// (deterministic).
		if d := len(b.Ctx) - len(a.Ctx); d != 0 {
			return d
		}
		if a.Block != b.Block {
			if a.Block {
				return 1
			}
			return -1
		}
		return strings.Compare(b.id(), a.id())
	})
	goneIDs := map[string]bool{}
	for _, l := range gone {
		goneIDs[l.id()] = true
	}
	for _, l := range gone {
		if l.Block {
			path := append(slices.Clone(l.Ctx), l.Text)
			if !r.blockExists(path) {
				p.removes = append(p.removes, l)
				continue
			}
			foreign := slices.ContainsFunc(r.inside(path), func(t string) bool {
				return !goneIDs[line{Ctx: path, Text: t}.id()] && !goneIDs[line{Ctx: path, Text: t, Block: true}.id()]
			})
			if l.Text == ctxRouter && len(l.Ctx) == 0 {
				// Interfaces that someone else put into OSPF need the
				// instance too.
				for _, ifc := range r.inside(nil) {
					if !strings.HasPrefix(ifc, "interface ") {
						continue
					}
					ctx := []string{ifc}
					foreign = foreign || slices.ContainsFunc(r.inside(ctx), func(t string) bool {
						return strings.HasPrefix(t, "ip ospf ") && !goneIDs[line{Ctx: ctx, Text: t}.id()]
					})
				}
			}
			if foreign {
				// Someone else wrote into the block: it stays, and is no
				// longer the driver's to remove.
				p.removes = append(p.removes, l)
				continue
			}
			p.ops = append(p.ops, op{Ctx: l.Ctx, Cmd: "no " + l.Text})
			p.removes = append(p.removes, l)
			continue
		}
		if r.has(l) {
			p.ops = append(p.ops, op{Ctx: l.Ctx, Cmd: "no " + l.Text})
		}
		p.removes = append(p.removes, l)
	}
	return p
}

func ctxName(ctx []string) string {
	if len(ctx) == 0 {
		return "top level"
	}
	return strings.Join(ctx, " / ")
}

// commands turns ops into vtysh -c arguments: entering and leaving
// blocks as needed, within one configure terminal session.
func commands(ops []op) []string {
	if len(ops) == 0 {
		return nil
	}
	out := []string{"configure terminal"}
	var cur []string
	for _, o := range ops {
		common := 0
		for common < len(cur) && common < len(o.Ctx) && cur[common] == o.Ctx[common] {
			common++
		}
		for range len(cur) - common {
			out = append(out, "exit")
		}
		out = append(out, o.Ctx[common:]...)
		cur = o.Ctx
		if o.Cmd != "" {
			out = append(out, o.Cmd)
		}
	}
	out = append(out, "end")
	return out
}
