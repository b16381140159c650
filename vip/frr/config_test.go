package frr

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// runningText is FRR 8.4's running configuration with the driver's lines
// for testDesired (cost 33) and a line of someone else's in router ospf.
const runningText = `Building configuration...

Current configuration:
!
frr version 8.4.4
frr defaults traditional
hostname node
service integrated-vtysh-config
!
interface lo
 ip ospf area 0.0.0.0 10.200.0.30
 ip ospf cost 33 10.200.0.30
exit
!
interface n-r
 ip ospf area 0.0.0.0
 ip ospf bfd
 ip ospf bfd profile novaedge-n-r
 ip ospf dead-interval 4
 ip ospf hello-interval 1
exit
!
router ospf
 ospf router-id 10.82.0.2
 graceful-restart
 timers throttle spf 10 100 5000
exit
!
bfd
 profile novaedge-n-r
  echo-mode
 exit
 !
exit
!
end
`

func testDesired(cost uint32) Desired {
	return Desired{
		RouterID:        netip.MustParseAddr("10.82.0.2"),
		GracefulRestart: true,
		Uplinks: []Uplink{{Interface: "n-r", Area: "0.0.0.0", HelloInterval: 1, DeadInterval: 4,
			BFD: &BFD{DetectMultiplier: 3, MinTx: 300 * time.Millisecond, MinRx: 300 * time.Millisecond, EchoMode: true}}},
		VIPs: []VIP{{Name: "web", Address: netip.MustParseAddr("10.200.0.30"), Area: "0.0.0.0", Cost: cost}},
	}
}

// ownAll marks every desired line and the blocks the driver creates as
// its own, as after a first reconcile on an empty FRR.
func ownAll(lines []line) map[string]line {
	owned := map[string]line{}
	for _, l := range lines {
		owned[l.id()] = l
	}
	for _, b := range []line{{Text: "router ospf", Block: true}, {Text: "bfd", Block: true}} {
		owned[b.id()] = b
	}
	return owned
}

func TestRenderMatchesRunning(t *testing.T) {
	lines := render(testDesired(33), "lo", DefaultGracePeriod)
	r := parseRunning(runningText)
	for _, l := range lines {
		ok := r.has(l)
		if l.Block {
			ok = r.blockExists(append(slices.Clone(l.Ctx), l.Text))
		}
		if !ok {
			t.Errorf("%s is not how FRR shows it", l)
		}
	}
	p := makePlan(lines, ownAll(lines), r)
	if len(p.ops) != 0 || len(p.conflicts) != 0 {
		t.Errorf("plan for an unchanged configuration: ops %v conflicts %v", p.ops, p.conflicts)
	}
}

func TestPlan(t *testing.T) {
	lines := render(testDesired(33), "lo", DefaultGracePeriod)
	for _, tc := range []struct {
		name      string
		desired   []line
		owned     map[string]line
		running   string
		want      []string
		conflicts []string
	}{
		{
			name:    "empty FRR: everything written, router first",
			desired: lines,
			owned:   map[string]line{},
			running: "frr version 8.4.4\n!\nend\n",
			want: []string{"configure terminal",
				"router ospf", "ospf router-id 10.82.0.2", "graceful-restart", "exit",
				"bfd", "profile novaedge-n-r", "echo-mode", "exit", "exit",
				"interface n-r", "ip ospf hello-interval 1", "ip ospf dead-interval 4", "ip ospf bfd", "ip ospf bfd profile novaedge-n-r", "ip ospf area 0.0.0.0", "exit",
				"interface lo", "ip ospf area 0.0.0.0 10.200.0.30", "ip ospf cost 33 10.200.0.30", "end"},
		},
		{
			name:    "lost by a restart of ospfd: written again",
			desired: lines,
			owned:   ownAll(lines),
			running: strings.Replace(strings.Replace(runningText, " ospf router-id 10.82.0.2\n", "", 1), " graceful-restart\n", "", 1),
			want:    []string{"configure terminal", "router ospf", "ospf router-id 10.82.0.2", "graceful-restart", "end"},
		},
		{
			name:    "cost change: the old line out, the new in, nothing else",
			desired: render(testDesired(50), "lo", DefaultGracePeriod),
			owned:   ownAll(lines),
			running: runningText,
			want:    []string{"configure terminal", "interface lo", "no ip ospf cost 33 10.200.0.30", "ip ospf cost 50 10.200.0.30", "end"},
		},
		{
			name:    "someone else's cost blocks the change",
			desired: render(testDesired(50), "lo", DefaultGracePeriod),
			owned: func() map[string]line {
				o := ownAll(lines)
				delete(o, line{Ctx: []string{"interface lo"}, Text: "ip ospf cost 33 10.200.0.30"}.id())
				return o
			}(),
			running:   runningText,
			conflicts: []string{`interface lo: "ip ospf cost 33 10.200.0.30" was not written by NovaEdge and differs from the desired "ip ospf cost 50 10.200.0.30": left in place, the desired setting is not applied`},
		},
		{
			name:    "withdraw everything: router ospf stays for the line someone else wrote",
			desired: nil,
			owned:   ownAll(lines),
			running: runningText,
			want: []string{"configure terminal",
				"bfd", "profile novaedge-n-r", "no echo-mode", "exit", "exit",
				"router ospf", "no ospf router-id 10.82.0.2", "no graceful-restart", "exit",
				"interface n-r", "no ip ospf hello-interval 1", "no ip ospf dead-interval 4", "no ip ospf bfd profile novaedge-n-r", "no ip ospf bfd", "no ip ospf area 0.0.0.0", "exit",
				"interface lo", "no ip ospf cost 33 10.200.0.30", "no ip ospf area 0.0.0.0 10.200.0.30", "exit",
				"bfd", "no profile novaedge-n-r", "exit",
				"no bfd", "end"},
		},
		{
			name:    "withdraw everything: router ospf goes when only the driver wrote into it",
			desired: nil,
			owned:   ownAll(lines),
			running: strings.Replace(runningText, " timers throttle spf 10 100 5000\n", "", 1),
			want: []string{"configure terminal",
				"bfd", "profile novaedge-n-r", "no echo-mode", "exit", "exit",
				"router ospf", "no ospf router-id 10.82.0.2", "no graceful-restart", "exit",
				"interface n-r", "no ip ospf hello-interval 1", "no ip ospf dead-interval 4", "no ip ospf bfd profile novaedge-n-r", "no ip ospf bfd", "no ip ospf area 0.0.0.0", "exit",
				"interface lo", "no ip ospf cost 33 10.200.0.30", "no ip ospf area 0.0.0.0 10.200.0.30", "exit",
				"bfd", "no profile novaedge-n-r", "exit",
				"no router ospf", "no bfd", "end"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := makePlan(tc.desired, tc.owned, parseRunning(tc.running))
			if diff := cmp.Diff(tc.want, commands(p.ops)); diff != "" {
				t.Errorf("commands (-want +got):\n%s", diff)
			}
			var got []string
			for _, c := range p.conflicts {
				got = append(got, c.Error())
			}
			if diff := cmp.Diff(tc.conflicts, got); diff != "" {
				t.Errorf("conflicts (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMatches(t *testing.T) {
	for _, tc := range []struct {
		key, text string
		want      bool
	}{
		{"ip ospf area *", "ip ospf area 0", true},
		{"ip ospf area *", "ip ospf area 0 10.0.0.1", false},
		{"ip ospf area * 10.0.0.1", "ip ospf area 0.0.0.1 10.0.0.1", true},
		{"ip ospf area * 10.0.0.1", "ip ospf area 0 10.0.0.2", false},
		{"graceful-restart ...", "graceful-restart", true},
		{"graceful-restart ...", "graceful-restart grace-period 30", true},
		{"ip ospf message-digest-key 1 ...", "ip ospf message-digest-key 2 md5 x", false},
	} {
		t.Run(tc.key+"/"+tc.text, func(t *testing.T) {
			if got := matches(tc.key, tc.text); got != tc.want {
				t.Fatalf("matches = %v, want %v", got, tc.want)
			}
		})
	}
}
