package topo

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestBuild(t *testing.T) {
	ctx := context.Background()
	prefix := fmt.Sprintf("xbp%d-", os.Getpid())
	t.Cleanup(func() {
		if err := Remove(prefix); err != nil {
			t.Error(err)
		}
	})
	tp, err := Build(ctx, prefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name, ns string
		args     []string
		want     string
	}{
		{"static neighbour for the backend", tp.NodeNS, []string{"ip", "neigh", "show", Backend.String()}, "PERMANENT"},
		{"static neighbour for the node", tp.GenNS, []string{"ip", "neigh", "show", NodeAddr.String()}, "PERMANENT"},
		{"vip routed via the node", tp.GenNS, []string{"ip", "route", "get", VIP.String()}, "via " + NodeAddr.String()},
		{"clients routed back via the backend", tp.NodeNS, []string{"ip", "route", "get", ClientBase.String()}, "via " + Backend.String()},
		{"forwarding on", tp.NodeNS, []string{"sysctl", "-n", "net.ipv4.ip_forward"}, "1"},
		{"node tx checksumming off", tp.NodeNS, []string{"ethtool", "-k", tp.NodeIf}, "tx-checksumming: off"},
		{"gen tx checksumming off", tp.GenNS, []string{"ethtool", "-k", tp.GenIf}, "tx-checksumming: off"},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			out, err := tp.Exec(ctx, c.ns, c.args...)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(out), c.want) {
				t.Fatalf("%s: %q does not contain %q", strings.Join(c.args, " "), out, c.want)
			}
		})
	}

	// A second topology under the same prefix must fail without touching
	// the first one's namespaces.
	if _, err := Build(ctx, prefix, nil); err == nil {
		t.Fatal("second Build with the same prefix succeeded")
	}
	if _, err := Attrs(tp.NodeNS, tp.NodeIf); err != nil {
		t.Fatalf("first topology damaged by the failed second Build: %v", err)
	}

	if err := tp.Close(); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{tp.GenNS, tp.NodeNS} {
		if _, err := os.Stat("/run/netns/" + ns); !os.IsNotExist(err) {
			t.Errorf("namespace %s still exists after Close (stat: %v)", ns, err)
		}
	}
	if err := tp.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
