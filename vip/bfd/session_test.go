package bfd

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestSessionConfigNormalize(t *testing.T) {
	base := SessionConfig{Peer: netip.MustParseAddr("192.0.2.1"), Local: netip.MustParseAddr("192.0.2.2")}
	with := func(f func(*SessionConfig)) SessionConfig {
		c := base
		f(&c)
		return c
	}
	tests := []struct {
		name    string
		in      SessionConfig
		want    SessionConfig
		wantErr string // the field the error must name; empty: success
		is      error
	}{
		{
			name: "defaults",
			in:   base,
			want: with(func(c *SessionConfig) {
				c.DetectMultiplier, c.DesiredMinTx, c.RequiredMinRx = 3, 300*time.Millisecond, 300*time.Millisecond
			}),
		},
		{
			name: "mapped addresses and sub-microsecond intervals",
			in: SessionConfig{Peer: netip.MustParseAddr("::ffff:192.0.2.1"), Local: netip.MustParseAddr("::ffff:192.0.2.2"),
				DetectMultiplier: 1, DesiredMinTx: 50*time.Millisecond + 1, RequiredMinRx: time.Second, ControlPlaneIndependent: true},
			want: SessionConfig{Peer: base.Peer, Local: base.Local, DetectMultiplier: 1, DesiredMinTx: 50 * time.Millisecond,
				RequiredMinRx: time.Second, ControlPlaneIndependent: true},
		},
		{
			name: "link-local with interface",
			in:   SessionConfig{Peer: netip.MustParseAddr("fe80::1"), Local: netip.MustParseAddr("fe80::2"), Interface: "eth0"},
			want: SessionConfig{Peer: netip.MustParseAddr("fe80::1"), Local: netip.MustParseAddr("fe80::2"), Interface: "eth0",
				DetectMultiplier: 3, DesiredMinTx: 300 * time.Millisecond, RequiredMinRx: 300 * time.Millisecond},
		},
		{name: "echo mode", in: with(func(c *SessionConfig) { c.EchoMode = true }), wantErr: "EchoMode", is: ErrEchoNotSupported},
		{name: "no peer", in: with(func(c *SessionConfig) { c.Peer = netip.Addr{} }), wantErr: "Peer"},
		{name: "no local", in: with(func(c *SessionConfig) { c.Local = netip.Addr{} }), wantErr: "Local"},
		{name: "peer with zone", in: with(func(c *SessionConfig) { c.Peer = netip.MustParseAddr("fe80::1%eth0") }), wantErr: "Peer"},
		{name: "unspecified local", in: with(func(c *SessionConfig) { c.Local = netip.IPv4Unspecified() }), wantErr: "Local"},
		{name: "multicast peer", in: with(func(c *SessionConfig) { c.Peer = netip.MustParseAddr("224.0.0.5") }), wantErr: "Peer"},
		{name: "mixed families", in: with(func(c *SessionConfig) { c.Local = netip.MustParseAddr("2001:db8::2") }), wantErr: "Local"},
		{name: "peer is local", in: with(func(c *SessionConfig) { c.Peer = c.Local }), wantErr: "Peer"},
		{
			name:    "link-local without interface",
			in:      SessionConfig{Peer: netip.MustParseAddr("fe80::1"), Local: netip.MustParseAddr("2001:db8::2")},
			wantErr: "Interface",
		},
		{name: "tx too fast", in: with(func(c *SessionConfig) { c.DesiredMinTx = 5 * time.Millisecond }), wantErr: "DesiredMinTx"},
		{name: "negative rx", in: with(func(c *SessionConfig) { c.RequiredMinRx = -time.Second }), wantErr: "RequiredMinRx"},
		{name: "rx beyond the field", in: with(func(c *SessionConfig) { c.RequiredMinRx = 2 * time.Hour }), wantErr: "RequiredMinRx"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.in.normalize()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("normalize: %v", err)
				}
				if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
					t.Errorf("normalize (-want +got):\n%s", diff)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.HasPrefix(strings.TrimPrefix(err.Error(), ErrInvalidConfig.Error()+": "), tc.wantErr+":") {
				t.Fatalf("normalize error = %v, want ErrInvalidConfig naming %s", err, tc.wantErr)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("normalize error = %v, want it to wrap %v", err, tc.is)
			}
		})
	}
}
