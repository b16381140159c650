package local

import (
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/vishvananda/netlink"

	"github.com/novaedge/novaedge/vip/local/internal/linux"
)

// addressCmp compares Addresses by value (netip types have unexported fields).
var addressCmp = cmp.Options{
	cmp.Comparer(func(a, b Address) bool { return a == b }),
	cmpopts.EquateEmpty(),
}

// applyStep is one Apply call and what must hold after it.
type applyStep struct {
	want    []Address
	errs    []string // substrings the joined error must contain; nil: no error
	errIs   error    // if set, errors.Is(err, errIs) must hold
	bound   []Address
	onLo    []string // addresses on lo besides the kernel's own
	onState []Address
}

func TestApply(t *testing.T) {
	v4 := addr("127.0.10.1", "lo")
	v4b := addr("127.0.10.2", "lo")
	v6 := addr("fd00::1", "lo")
	v6b := addr("fd00::2", "lo")

	tests := []struct {
		name  string
		pre   []string // on lo before the manager starts, as an admin would add them
		steps []applyStep
	}{
		{
			name: "add ipv4 and ipv6",
			steps: []applyStep{{
				want:    []Address{v6, v4},
				bound:   []Address{v4, v6},
				onLo:    []string{"127.0.10.1/32", "fd00::1/128"},
				onState: []Address{v4, v6},
			}},
		},
		{
			name: "apply is idempotent",
			steps: []applyStep{
				{want: []Address{v4, v6}, bound: []Address{v4, v6}, onLo: []string{"127.0.10.1/32", "fd00::1/128"}, onState: []Address{v4, v6}},
				{want: []Address{v4, v6}, bound: []Address{v4, v6}, onLo: []string{"127.0.10.1/32", "fd00::1/128"}, onState: []Address{v4, v6}},
				{want: []Address{v6, v4, v4}, bound: []Address{v4, v6}, onLo: []string{"127.0.10.1/32", "fd00::1/128"}, onState: []Address{v4, v6}},
			},
		},
		{
			name: "address no longer wanted is removed",
			steps: []applyStep{
				{want: []Address{v4, v4b, v6, v6b}, bound: []Address{v4, v4b, v6, v6b}, onLo: []string{"127.0.10.1/32", "127.0.10.2/32", "fd00::1/128", "fd00::2/128"}, onState: []Address{v4, v4b, v6, v6b}},
				{want: []Address{v4, v6}, bound: []Address{v4, v6}, onLo: []string{"127.0.10.1/32", "fd00::1/128"}, onState: []Address{v4, v6}},
				{want: nil, onLo: nil, onState: nil},
			},
		},
		{
			name: "pre-existing address is adopted and never removed",
			pre:  []string{"127.0.10.2/32", "fd00::2/128"},
			steps: []applyStep{
				{want: []Address{v4, v4b, v6b}, bound: []Address{v4, v4b, v6b}, onLo: []string{"127.0.10.1/32", "127.0.10.2/32", "fd00::2/128"}, onState: []Address{v4}},
				{want: nil, onLo: []string{"127.0.10.2/32", "fd00::2/128"}, onState: nil},
			},
		},
		{
			name: "ip bound with another prefix length counts as bound",
			pre:  []string{"198.51.100.5/24"},
			steps: []applyStep{
				{want: []Address{addr("198.51.100.5", "lo")}, bound: []Address{addr("198.51.100.5", "lo")}, onLo: []string{"198.51.100.5/24"}},
				{want: nil, onLo: []string{"198.51.100.5/24"}},
			},
		},
		{
			name: "empty interface means lo",
			steps: []applyStep{{
				want:    []Address{{Prefix: v4.Prefix}},
				bound:   []Address{v4},
				onLo:    []string{"127.0.10.1/32"},
				onState: []Address{v4},
			}},
		},
		{
			name: "unknown interface is named and does not stop the others",
			steps: []applyStep{{
				want:    []Address{addr("127.0.10.1", "nope0"), v6, v4b},
				errs:    []string{"bind 127.0.10.1/32 on nope0: no such interface nope0"},
				errIs:   ErrNoSuchInterface,
				bound:   []Address{v4b, v6},
				onLo:    []string{"127.0.10.2/32", "fd00::1/128"},
				onState: []Address{v4b, v6},
			}},
		},
		{
			name: "invalid address does not stop the others",
			steps: []applyStep{{
				want:    []Address{{Prefix: netip.MustParsePrefix("127.0.10.0/24"), Interface: "lo"}, v4},
				errs:    []string{"bind 127.0.10.0/24 on lo: 127.0.10.0/24 is not a host prefix"},
				bound:   []Address{v4},
				onLo:    []string{"127.0.10.1/32"},
				onState: []Address{v4},
			}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := newTestNS(t)
			for _, p := range tc.pre {
				n.addAddr(t, "lo", p, 0)
			}
			state := filepath.Join(t.TempDir(), "vip-local.json")
			m, err := New(Options{StateFile: state, Handle: n.h, Logger: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range tc.steps {
				checkApply(t, n, m, state, i, st)
			}
		})
	}
}

// checkApply runs one step against m and checks the error, Bound, the
// addresses on lo and the state file.
func checkApply(t *testing.T, n *testNS, m *Manager, state string, i int, st applyStep) {
	t.Helper()
	err := m.Apply(st.want)
	switch {
	case len(st.errs) == 0 && err != nil:
		t.Fatalf("step %d: Apply: %v", i, err)
	case len(st.errs) > 0 && err == nil:
		t.Fatalf("step %d: Apply succeeded, want an error containing %q", i, st.errs)
	}
	for _, s := range st.errs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("step %d: Apply error %q does not contain %q", i, err, s)
		}
	}
	if st.errIs != nil && !errors.Is(err, st.errIs) {
		t.Errorf("step %d: Apply error %v is not %v", i, err, st.errIs)
	}
	if diff := cmp.Diff(st.bound, m.Bound(), addressCmp); diff != "" {
		t.Errorf("step %d: Bound (-want +got):\n%s", i, diff)
	}
	if diff := cmp.Diff(st.onLo, n.addrsOn(t, "lo"), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("step %d: addresses on lo (-want +got):\n%s", i, diff)
	}
	if diff := cmp.Diff(st.onState, readState(t, state), addressCmp); diff != "" {
		t.Errorf("step %d: state file (-want +got):\n%s", i, diff)
	}
}

// readState returns the addresses recorded in the state file, nil if there is
// none.
func readState(t *testing.T, path string) []Address {
	t.Helper()
	owned, err := loadState(path)
	if err != nil {
		t.Fatal(err)
	}
	return sortedKeys(owned)
}

// TestIPv6NoDAD binds on a veth, where (unlike on lo) the kernel runs
// duplicate address detection, and checks the address is usable at once.
func TestIPv6NoDAD(t *testing.T) {
	n := newTestNS(t)
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "nt-veth0"}, PeerName: "nt-veth1"}
	if err := n.h.LinkAdd(veth); err != nil {
		t.Fatalf("add veth pair: %v", err)
	}
	for _, name := range []string{"nt-veth0", "nt-veth1"} {
		link, err := n.h.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.h.LinkSetUp(link); err != nil {
			t.Fatalf("bring %s up: %v", name, err)
		}
	}
	// Control: without NODAD the same kind of address starts tentative, so
	// the check below can fail.
	n.addAddr(t, "nt-veth0", "fd00::99/128", 0)

	m, err := New(Options{Handle: n.h, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Apply([]Address{addr("fd00::10", "nt-veth0")}); err != nil {
		t.Fatal(err)
	}
	flags := map[string]int{}
	for _, a := range n.addrList(t, "nt-veth0") {
		flags[addrPrefix(t, a).String()] = a.Flags
	}
	if f, ok := flags["fd00::99/128"]; !ok || f&linux.FlagTentative == 0 {
		t.Fatalf("control address fd00::99/128 flags %#x (present %v): want tentative, so the test can tell", f, ok)
	}
	f, ok := flags["fd00::10/128"]
	if !ok {
		t.Fatalf("fd00::10/128 not on nt-veth0: %v", flags)
	}
	if f&linux.FlagNoDAD == 0 {
		t.Errorf("fd00::10/128 flags %#x: want nodad", f)
	}
	if f&linux.FlagTentative != 0 {
		t.Errorf("fd00::10/128 flags %#x: tentative, want usable at once", f)
	}
}

func TestRestart(t *testing.T) {
	v4 := addr("127.0.10.1", "lo")
	v6 := addr("fd00::1", "lo")
	admin := addr("127.0.10.9", "lo")

	t.Run("state file tells the new manager what is its own", func(t *testing.T) {
		n := newTestNS(t)
		n.addAddr(t, "lo", "127.0.10.9/32", 0)
		dir := t.TempDir()
		state := filepath.Join(dir, "sub", "vip-local.json")
		m1, err := New(Options{StateFile: state, Handle: n.h, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		if err := m1.Apply([]Address{v4, v6, admin}); err != nil {
			t.Fatal(err)
		}

		m2, err := New(Options{StateFile: state, Handle: n.h, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]Address{v4, v6}, m2.Bound(), addressCmp); diff != "" {
			t.Errorf("Bound after restart (-want +got):\n%s", diff)
		}
		checkApply(t, n, m2, state, 0, applyStep{
			want:    []Address{v4},
			bound:   []Address{v4},
			onLo:    []string{"127.0.10.1/32", "127.0.10.9/32"},
			onState: []Address{v4},
		})
		checkApply(t, n, m2, state, 1, applyStep{onLo: []string{"127.0.10.9/32"}})
		// The atomic writes leave no temporary files behind.
		entries, err := os.ReadDir(filepath.Dir(state))
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 0 {
			t.Errorf("state directory holds %v, want nothing once no address is owned", entries)
		}
	})

	t.Run("owned address lost meanwhile is bound again and still owned", func(t *testing.T) {
		n := newTestNS(t)
		state := filepath.Join(t.TempDir(), "vip-local.json")
		m1, err := New(Options{StateFile: state, Handle: n.h})
		if err != nil {
			t.Fatal(err)
		}
		if err := m1.Apply([]Address{v4, v6}); err != nil {
			t.Fatal(err)
		}
		// As after a reboot: the addresses are gone, the state file is not.
		n.delAddr(t, "lo", "127.0.10.1/32")
		n.delAddr(t, "lo", "fd00::1/128")

		m2, err := New(Options{StateFile: state, Handle: n.h, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		checkApply(t, n, m2, state, 0, applyStep{
			want:    []Address{v4, v6},
			bound:   []Address{v4, v6},
			onLo:    []string{"127.0.10.1/32", "fd00::1/128"},
			onState: []Address{v4, v6},
		})
		checkApply(t, n, m2, state, 1, applyStep{})
	})

	t.Run("without state file a restart removes nothing", func(t *testing.T) {
		n := newTestNS(t)
		m1, err := New(Options{Handle: n.h})
		if err != nil {
			t.Fatal(err)
		}
		if err := m1.Apply([]Address{v4}); err != nil {
			t.Fatal(err)
		}
		m2, err := New(Options{Handle: n.h, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range [][]Address{{v4}, nil} {
			if err := m2.Apply(want); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			if diff := cmp.Diff([]string{"127.0.10.1/32"}, n.addrsOn(t, "lo")); diff != "" {
				t.Errorf("step %d: addresses on lo (-want +got):\n%s", i, diff)
			}
		}
	})
}

func TestNewCorruptStateFile(t *testing.T) {
	tests := []struct {
		name    string
		content string
		wantErr string
	}{
		{name: "not json", content: "{not json", wantErr: "corrupt state file"},
		{name: "empty", content: "", wantErr: "corrupt state file"},
		{name: "unknown version", content: `{"version": 7, "addresses": []}`, wantErr: "unsupported version 7"},
		{name: "bad prefix", content: `{"version": 1, "addresses": [{"prefix": "127.0.10.300/32", "interface": "lo"}]}`, wantErr: "address 0"},
		{name: "not a host prefix", content: `{"version": 1, "addresses": [{"prefix": "127.0.10.0/24", "interface": "lo"}]}`, wantErr: "not a host prefix"},
		{name: "no interface", content: `{"version": 1, "addresses": [{"prefix": "127.0.10.1/32"}]}`, wantErr: "no interface"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "vip-local.json")
			if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := New(Options{StateFile: path})
			if err == nil {
				t.Fatal("New succeeded, want an error")
			}
			for _, s := range []string{path, tc.wantErr} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("New error %q does not contain %q", err, s)
				}
			}
		})
	}
}

func TestRelease(t *testing.T) {
	n := newTestNS(t)
	n.addAddr(t, "lo", "127.0.10.9/32", 0)
	state := filepath.Join(t.TempDir(), "vip-local.json")
	m, err := New(Options{StateFile: state, Handle: n.h, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Apply([]Address{addr("127.0.10.1", "lo"), addr("fd00::1", "lo"), addr("127.0.10.9", "lo")}); err != nil {
		t.Fatal(err)
	}
	if err := m.Release(); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if diff := cmp.Diff([]string{"127.0.10.9/32"}, n.addrsOn(t, "lo")); diff != "" {
		t.Errorf("addresses on lo after Release (-want +got):\n%s", diff)
	}
	if got := m.Bound(); len(got) != 0 {
		t.Errorf("Bound after Release = %v, want none", got)
	}
	if _, err := os.Stat(state); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state file after Release: %v, want it removed", err)
	}
	// A new manager finds nothing of its own.
	m2, err := New(Options{StateFile: state, Handle: n.h})
	if err != nil {
		t.Fatal(err)
	}
	if got := m2.Bound(); len(got) != 0 {
		t.Errorf("Bound of a new manager after Release = %v, want none", got)
	}
}

// testLogger logs into the test's output, shown with -v or on failure.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}
