package helm_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// scriptPath is one of the chart's init scripts.
func scriptPath(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(chartDir(t), "files", name)
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// fakeLink is an interface of a fake /sys/class/net.
type fakeLink struct {
	name    string
	devtype string   // DEVTYPE in uevent; "" for a plain device
	lowers  []string // lower_<name> links: a VLAN's parent, a bond's slaves
}

// fakeHost is a directory tree standing in for the files sysctls.sh reads
// and writes.
type fakeHost struct {
	sysctlNet, sysClassNet, procNet string
	links                           []string
}

func newFakeHost(t *testing.T, links []fakeLink, route, ipv6Route, reserved string) *fakeHost {
	t.Helper()
	dir := t.TempDir()
	h := &fakeHost{
		sysctlNet:   filepath.Join(dir, "proc-sys-net"),
		sysClassNet: filepath.Join(dir, "sys-class-net"),
		procNet:     filepath.Join(dir, "proc-net"),
	}
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range links {
		uevent := "INTERFACE=" + l.name + "\nIFINDEX=7\n"
		if l.devtype != "" {
			uevent = "DEVTYPE=" + l.devtype + "\n" + uevent
		}
		write(filepath.Join(h.sysClassNet, l.name, "uevent"), uevent)
		write(filepath.Join(h.sysctlNet, "ipv4", "conf", l.name, "accept_local"), "0\n")
		h.links = append(h.links, l.name)
	}
	for _, l := range links {
		for _, lower := range l.lowers {
			if err := os.Symlink(filepath.Join("..", lower), filepath.Join(h.sysClassNet, l.name, "lower_"+lower)); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(filepath.Join(h.procNet, "route"), "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"+route)
	write(filepath.Join(h.procNet, "ipv6_route"), ipv6Route)
	write(filepath.Join(h.sysctlNet, "ipv4", "ip_local_reserved_ports"), reserved+"\n")
	return h
}

// acceptLocal returns the interfaces whose accept_local is 1.
func (h *fakeHost) acceptLocal(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, l := range h.links {
		b, err := os.ReadFile(filepath.Join(h.sysctlNet, "ipv4", "conf", l, "accept_local"))
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(string(b)) == "1" {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return out
}

func (h *fakeHost) reserved(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.sysctlNet, "ipv4", "ip_local_reserved_ports"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// runScript runs a chart script with sh and the given environment; it
// returns the exit status and the combined output.
func runScript(t *testing.T, script string, env ...string) (int, string) {
	t.Helper()
	cmd := exec.Command("sh", script)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), out.String()
	}
	t.Fatalf("run %s: %v", script, err)
	return 0, ""
}

// Lines of /proc/net/route and /proc/net/ipv6_route.
const (
	v4Default = "%s\t00000000\t0102A8C0\t0003\t0\t0\t%d\t00000000\t0\t0\t0\n"
	v4Subnet  = "%s\t0002A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
	v6Default = "00000000000000000000000000000000 00 00000000000000000000000000000000 00 fe800000000000000000000000000001 %08x 00000001 00000000 %08x %8s\n"
	rtfUp     = 0x0001
	rtfReject = 0x0200
)

func TestSysctlsScript(t *testing.T) {
	script := scriptPath(t, "sysctls.sh")
	eth := func(names ...string) []fakeLink {
		var out []fakeLink
		for _, n := range names {
			out = append(out, fakeLink{name: n})
		}
		return out
	}
	bond := fakeLink{name: "bond0", devtype: "bond", lowers: []string{"eth1", "eth2"}}
	for _, tc := range []struct {
		name       string
		links      []fakeLink
		route      string
		ipv6Route  string
		interfaces string
		fastpath   string
		reserved   string
		wantAccept []string
		wantPorts  string
		wantExit   int
		wantOutput string
	}{
		{
			name: "named interface", links: eth("eth0", "eth1"), interfaces: "eth0",
			wantAccept: []string{"eth0"}, wantPorts: "10000-32767",
		},
		{
			name: "a VLAN stands for its parent", links: append(eth("eth0"), fakeLink{name: "eth0.100", devtype: "vlan", lowers: []string{"eth0"}}),
			interfaces: "eth0.100", wantAccept: []string{"eth0"}, wantPorts: "10000-32767",
		},
		{
			name: "a bond stands for its slaves", links: append(eth("eth0", "eth1", "eth2"), bond),
			interfaces: "bond0", wantAccept: []string{"eth1", "eth2"}, wantPorts: "10000-32767",
		},
		{
			name:       "a VLAN on a bond stands for the slaves",
			links:      append(eth("eth1", "eth2"), bond, fakeLink{name: "bond0.7", devtype: "vlan", lowers: []string{"bond0"}}),
			interfaces: "bond0.7", wantAccept: []string{"eth1", "eth2"}, wantPorts: "10000-32767",
		},
		{
			name: "a macvlan is a device of its own", links: append(eth("eth0"), fakeLink{name: "mv0", devtype: "macvlan", lowers: []string{"eth0"}}),
			interfaces: "mv0", wantAccept: []string{"mv0"}, wantPorts: "10000-32767",
		},
		{
			name: "several named interfaces", links: eth("eth0", "eth1", "eth2"), interfaces: "eth2 eth0",
			wantAccept: []string{"eth0", "eth2"}, wantPorts: "10000-32767",
		},
		{
			name: "the best IPv4 default route", links: eth("eth0", "eth1", "eth2"),
			route:      fmt.Sprintf(v4Default, "eth0", 100) + fmt.Sprintf(v4Subnet, "eth2") + fmt.Sprintf(v4Default, "eth1", 50),
			ipv6Route:  fmt.Sprintf(v6Default, 0x400, rtfUp, "eth2"),
			wantAccept: []string{"eth1"}, wantPorts: "10000-32767", wantOutput: "the default route's interfaces: eth1",
		},
		{
			name: "IPv6 default route when IPv4 has none, all its nexthops", links: eth("eth0", "eth1", "eth2"),
			route: "*\t00000000\t00000000\t0201\t0\t0\t0\t00000000\t0\t0\t0\n" + fmt.Sprintf(v4Subnet, "eth2"),
			ipv6Route: fmt.Sprintf(v6Default, 0x400, rtfUp, "eth0") + fmt.Sprintf(v6Default, 0x400, rtfUp, "eth1") +
				fmt.Sprintf(v6Default, 0x800, rtfUp, "eth2") + fmt.Sprintf(v6Default, 0, rtfUp|rtfReject, "eth2") +
				fmt.Sprintf(v6Default, 0, rtfUp, "lo"),
			wantAccept: []string{"eth0", "eth1"}, wantPorts: "10000-32767",
		},
		{
			name: "a missing interface is reported and the others are set", links: eth("eth0"), interfaces: "eth9 eth0", fastpath: "auto",
			wantAccept: []string{"eth0"}, wantPorts: "10000-32767", wantOutput: "ERROR: interface eth9 does not exist",
		},
		{
			name: "a missing interface fails with fastpath on", links: eth("eth0"), interfaces: "eth9", fastpath: "on",
			wantPorts: "10000-32767", wantExit: 1, wantOutput: "the fast path cannot run as set up",
		},
		{
			name: "interface names are not file patterns", links: eth("eth0"), interfaces: "e*", fastpath: "on",
			wantPorts: "10000-32767", wantExit: 1, wantOutput: "interface e* does not exist",
		},
		{
			name: "no default route", links: eth("eth0"), fastpath: "auto",
			wantPorts: "10000-32767", wantOutput: "no interface named and no IPv4 or IPv6 default route",
		},
		{
			name: "no default route fails with fastpath on", links: eth("eth0"), fastpath: "on",
			wantPorts: "10000-32767", wantExit: 1, wantOutput: "no interface named",
		},
		{
			name: "a bond without slaves", links: []fakeLink{{name: "bond0", devtype: "bond"}}, interfaces: "bond0", fastpath: "on",
			wantPorts: "10000-32767", wantExit: 1, wantOutput: "interface bond0 has no lower device",
		},
		{
			name: "the administrator's reserved ports are kept", links: eth("eth0"), interfaces: "eth0", reserved: "8080,9000-9100",
			wantAccept: []string{"eth0"}, wantPorts: "8080,9000-9100,10000-32767",
		},
		{
			name: "ports already reserved are not written", links: eth("eth0"), interfaces: "eth0", reserved: "8080,10000-32767",
			wantAccept: []string{"eth0"}, wantPorts: "8080,10000-32767", wantOutput: "ports 10000-32767 are already reserved",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHost(t, tc.links, tc.route, tc.ipv6Route, tc.reserved)
			fastpath := tc.fastpath
			if fastpath == "" {
				fastpath = "on" // every problem fails the script, so none goes unnoticed
			}
			code, out := runScript(t, script,
				"SYSCTL_NET="+h.sysctlNet, "SYS_CLASS_NET="+h.sysClassNet, "PROC_NET="+h.procNet,
				"INTERFACES="+tc.interfaces, "FASTPATH="+fastpath, "NAT_PORT_RANGE=10000-32767")
			if code != tc.wantExit {
				t.Errorf("exit status %d, want %d; output:\n%s", code, tc.wantExit, out)
			}
			if tc.wantOutput != "" && !strings.Contains(out, tc.wantOutput) {
				t.Errorf("output does not say %q:\n%s", tc.wantOutput, out)
			}
			if diff := cmp.Diff(tc.wantAccept, h.acceptLocal(t)); diff != "" {
				t.Errorf("interfaces with accept_local=1 (-want +have):\n%s\noutput:\n%s", diff, out)
			}
			if have := h.reserved(t); have != tc.wantPorts {
				t.Errorf("ip_local_reserved_ports %q, want %q; output:\n%s", have, tc.wantPorts, out)
			}
		})
	}
}

// needRoot fails the test unless it runs as root with the given tools.
func needRoot(t *testing.T, tools ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test changes network namespaces and mounts: run it as root (make test does)")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing: install it (iproute2 and util-linux; hack/install-deps.sh installs iproute2)", tool)
		}
	}
}

var netnsSeq atomic.Int32

// netns creates a network namespace for the test and deletes it afterwards.
func netns(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("nehelm-%d-%d", os.Getpid(), netnsSeq.Add(1))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v\n%s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v\n%s", name, err, out)
		}
	})
	return name
}

// inNetns runs a command in network namespace ns.
func inNetns(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("in %s: %s: %v\n%s", ns, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestSysctlsScriptKernel runs sysctls.sh against a real kernel, set up as
// the init container sees it: in a network namespace (the pod's host
// network), with /proc/sys read-only, the namespace's /proc/sys/net
// bind-mounted elsewhere, and no capability at all (uid 0 only).
func TestSysctlsScriptKernel(t *testing.T) {
	needRoot(t, "ip", "unshare", "setpriv", "mount")
	script := scriptPath(t, "sysctls.sh")
	for _, tc := range []struct {
		name       string
		setup      [][]string
		interfaces string
		wantAccept map[string]string
	}{
		{
			name: "the best IPv4 default route",
			setup: [][]string{
				{"ip", "addr", "add", "192.0.2.2/24", "dev", "v0"},
				{"ip", "addr", "add", "198.51.100.2/24", "dev", "v1"},
				{"ip", "route", "add", "default", "via", "192.0.2.1", "dev", "v0", "metric", "100"},
				{"ip", "route", "add", "default", "via", "198.51.100.1", "dev", "v1", "metric", "50"},
			},
			wantAccept: map[string]string{"v0": "0", "v1": "1"},
		},
		{
			name: "the IPv6 default route",
			setup: [][]string{
				{"ip", "-6", "addr", "add", "2001:db8::2/64", "dev", "v0", "nodad"},
				{"ip", "-6", "route", "add", "default", "via", "2001:db8::1", "dev", "v0"},
			},
			wantAccept: map[string]string{"v0": "1", "v1": "0"},
		},
		{
			name:       "named interfaces",
			interfaces: "v1 v0",
			wantAccept: map[string]string{"v0": "1", "v1": "1"},
		},
		{
			// A macvlan has a lower device too, but XDP runs on the
			// macvlan itself (the agent expands only VLANs and bonds).
			name:       "a macvlan is a device of its own",
			setup:      [][]string{{"ip", "link", "add", "link", "v0", "name", "mv0", "type", "macvlan"}},
			interfaces: "mv0",
			wantAccept: map[string]string{"v0": "0", "mv0": "1"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := netns(t)
			inNetns(t, ns, "ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1")
			inNetns(t, ns, "ip", "link", "set", "v0", "up")
			inNetns(t, ns, "ip", "link", "set", "v1", "up")
			for _, cmd := range tc.setup {
				inNetns(t, ns, cmd...)
			}
			inNetns(t, ns, "sh", "-c", "echo 0 > /proc/sys/net/ipv4/conf/all/accept_local; echo 0 > /proc/sys/net/ipv4/conf/v0/accept_local; echo 0 > /proc/sys/net/ipv4/conf/v1/accept_local; echo 5000 > /proc/sys/net/ipv4/ip_local_reserved_ports")

			// In a private mount namespace: the namespace's /proc/sys/net at
			// $1, /proc/sys read-only as a runtime mounts it, then the
			// script without any capability (the wrapper checks).
			netDir := t.TempDir()
			wrapper := `set -e
mount --bind /proc/sys/net "$1"
mount --bind /proc/sys /proc/sys
mount -o remount,bind,ro /proc/sys
if (echo 1 >/proc/sys/net/ipv4/conf/v0/accept_local) 2>/dev/null; then echo "/proc/sys is writable" >&2; exit 98; fi
exec setpriv --bounding-set=-all --inh-caps=-all --ambient-caps=-all -- sh -c '
	grep -q "^CapEff:[[:space:]]*0*$" /proc/self/status || { echo "capabilities left" >&2; exit 97; }
	exec sh "$0"' "$2"`
			out := inNetns(t, ns, "env", "-i", "PATH="+os.Getenv("PATH"), "SYSCTL_NET="+netDir, "INTERFACES="+tc.interfaces,
				"FASTPATH=on", "NAT_PORT_RANGE=10000-32767",
				"unshare", "--mount", "--propagation", "private", "--", "sh", "-c", wrapper, "wrapper", netDir, script)
			t.Logf("script output:\n%s", out)

			for dev, want := range tc.wantAccept {
				have := strings.TrimSpace(inNetns(t, ns, "cat", "/proc/sys/net/ipv4/conf/"+dev+"/accept_local"))
				if have != want {
					t.Errorf("net.ipv4.conf.%s.accept_local=%s, want %s", dev, have, want)
				}
			}
			if have := strings.TrimSpace(inNetns(t, ns, "cat", "/proc/sys/net/ipv4/ip_local_reserved_ports")); have != "5000,10000-32767" {
				t.Errorf("net.ipv4.ip_local_reserved_ports=%s, want 5000,10000-32767", have)
			}
		})
	}
}

// TestMountBPFFSScript runs mount-bpffs.sh in a private mount namespace:
// it mounts a bpffs where there is none, and leaves one that is there.
func TestMountBPFFSScript(t *testing.T) {
	needRoot(t, "unshare", "mount")
	script := scriptPath(t, "mount-bpffs.sh")
	dir := t.TempDir()
	check := `set -e
BPFFS="$1" sh "$0"
grep -q "^bpf $1 bpf " /proc/self/mounts || { echo "no bpffs at $1 after the first run" >&2; exit 99; }
BPFFS="$1" sh "$0"
test "$(grep -c " $1 " /proc/self/mounts)" = 1 || { echo "the second run mounted again" >&2; exit 99; }`
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--", "sh", "-c", check, script, dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"mounting a bpffs on " + dir, dir + " is a bpffs already"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output does not say %q:\n%s", want, out)
		}
	}
	// The mount stayed in the namespace that is gone now.
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), " "+dir+" ") {
		t.Errorf("%s is still mounted in the test's namespace", dir)
	}
}
