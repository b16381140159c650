package failover

import (
	"strings"
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	hold := 900 * time.Millisecond
	tm := Timing{HoldDown: hold, Grace: 12 * time.Second}
	a := Assignment{VIP: "web", Active: "a", Standbys: []string{"b", "c"}}
	up := Peer{State: Up, UpSince: t0.Add(-time.Hour)}
	tests := []struct {
		name   string
		self   string
		asg    Assignment
		peers  map[string]Peer
		serve  bool
		reason string
	}{
		{"active with everyone up", "a", a, map[string]Peer{"b": up, "c": up}, true, "active"},
		{"active without heartbeats (standalone)", "a", a, nil, true, "active"},
		{"standby without heartbeats", "b", a, nil, false, "active a is unknown"},
		{"first standby, active lost", "b", a, map[string]Peer{"a": {State: Lost}, "c": up}, true, "standby took over"},
		{"first standby, active says it lost us: the active is alive", "b", a, map[string]Peer{"a": {State: SaysLost}}, false, "active a is says it lost us"},
		{"active, first standby says it lost us: yield", "a", a, map[string]Peer{"b": {State: SaysLost}, "c": up}, false, "standby b lost our heartbeats"},
		{"active lost the first standby: keep serving", "a", a, map[string]Peer{"b": {State: Lost}}, true, "active"},
		{"second standby, active lost but first standby alive", "c", a, map[string]Peer{"a": {State: Lost}, "b": up}, false, "earlier standby b is up"},
		{"second standby, active and first standby lost", "c", a, map[string]Peer{"a": {State: Lost}, "b": {State: Lost}}, true, "standby took over"},
		{"active reclaims only after the hold-down", "a", a, map[string]Peer{"b": {State: Up, UpSince: t0.Add(-hold / 2)}}, false, "waiting"},
		{"active after the hold-down", "a", a, map[string]Peer{"b": {State: Up, UpSince: t0.Add(-hold)}}, true, "active"},
		{"no active assigned: first standby", "b", Assignment{Standbys: []string{"b", "c"}}, nil, true, "no active assigned"},
		{"no active assigned: second standby", "c", Assignment{Standbys: []string{"b", "c"}}, map[string]Peer{"b": up}, false, "earlier standby b"},
		{"active alone", "a", Assignment{Active: "a"}, nil, true, "no standby"},
		{"not assigned", "z", a, nil, false, "not assigned"},
		{"first standby within the grace", "b", a, map[string]Peer{"a": {State: Lost, LostSince: t0.Add(-11 * time.Second)}}, true, "standby took over"},
		{"active within the standby's grace", "a", a, map[string]Peer{"b": {State: SaysLost, LostSince: t0.Add(-11 * time.Second)}, "c": up}, false, "standby b lost our heartbeats"},
		{"active after the standby's grace: reclaims", "a", a, map[string]Peer{"b": {State: SaysLost, LostSince: t0.Add(-12 * time.Second)}, "c": up}, true, "its grace is over"},
		{"first standby after the grace: the controller still names the active", "b", a, map[string]Peer{"a": {State: Lost, LostSince: t0.Add(-12 * time.Second)}}, false, "only the path between us failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(tt.self, tt.asg, tt.peers, t0, tm)
			if d.Serve != tt.serve || !strings.Contains(d.Reason, tt.reason) {
				t.Errorf("Decide = %+v, want serve=%v with %q", d, tt.serve, tt.reason)
			}
		})
	}
}

// TestOneNodeServes: in every situation heartbeats can produce between a
// two-node VIP's nodes, exactly one serves (a cut in both directions once
// the standby's grace is over).
func TestOneNodeServes(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := Assignment{VIP: "web", Active: "a", Standbys: []string{"b"}}
	up := Peer{State: Up, UpSince: t0.Add(-time.Hour)}
	// What each side sees, by what happens on the wire.
	cases := []struct {
		name         string
		aSees, bSees Peer
	}{
		{"healthy", up, up},
		{"a's packets stop reaching b", Peer{State: SaysLost}, Peer{State: Lost}},
		{"b's packets stop reaching a", Peer{State: Lost}, Peer{State: SaysLost}},
		{"a's packets stop reaching b, after the grace", Peer{State: SaysLost, LostSince: t0.Add(-time.Minute)}, Peer{State: Lost, LostSince: t0.Add(-time.Minute)}},
		{"b's packets stop reaching a, after the grace", Peer{State: Lost, LostSince: t0.Add(-time.Minute)}, Peer{State: SaysLost, LostSince: t0.Add(-time.Minute)}},
		{"both directions cut, after the grace", Peer{State: Lost, LostSince: t0.Add(-time.Minute)}, Peer{State: Lost, LostSince: t0.Add(-time.Minute)}},
		{"starting", Peer{}, Peer{}},
	}
	for _, c := range cases {
		tm := Timing{HoldDown: time.Second, Grace: 12 * time.Second}
		da := Decide("a", a, map[string]Peer{"b": c.aSees}, t0, tm)
		db := Decide("b", a, map[string]Peer{"a": c.bSees}, t0, tm)
		if da.Serve == db.Serve {
			t.Errorf("%s: a serves=%v (%s), b serves=%v (%s); want exactly one", c.name, da.Serve, da.Reason, db.Serve, db.Reason)
		}
	}
}
