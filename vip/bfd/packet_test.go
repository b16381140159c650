package bfd

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// wire builds a packet from hex, ignoring spaces, so that test tables show
// the bytes of RFC 5880 §4.1 field by field.
func wire(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatalf("bad hex in test table: %v", err)
	}
	return b
}

func TestControlPacketRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		pkt  ControlPacket
		// wire: vers|diag, sta|flags, mult, len, my, your, tx, rx, echo.
		wire string
	}{
		{
			name: "down, no remote yet, slow tx",
			pkt: ControlPacket{State: StateDown, DetectMult: 3, MyDiscriminator: 0x01020304,
				DesiredMinTxInterval: time.Second, RequiredMinRxInterval: 300 * time.Millisecond},
			wire: "20 40 03 18 01020304 00000000 000f4240 000493e0 00000000",
		},
		{
			name: "up with poll and C bit",
			pkt: ControlPacket{State: StateUp, Poll: true, ControlPlaneIndependent: true, DetectMult: 5,
				MyDiscriminator: 7, YourDiscriminator: 9, DesiredMinTxInterval: 100 * time.Millisecond,
				RequiredMinRxInterval: 200 * time.Millisecond, RequiredMinEchoRxInterval: 50 * time.Millisecond},
			wire: "20 e8 05 18 00000007 00000009 000186a0 00030d40 0000c350",
		},
		{
			name: "final, demand, diag detection expired, init",
			pkt: ControlPacket{Diag: DiagControlDetectionExpired, State: StateInit, Final: true, Demand: true,
				DetectMult: 1, MyDiscriminator: 0xffffffff, YourDiscriminator: 1, DesiredMinTxInterval: maxInterval,
				RequiredMinRxInterval: time.Microsecond},
			wire: "21 92 01 18 ffffffff 00000001 ffffffff 00000001 00000000",
		},
		{
			name: "admin down, diag admin down, no discriminator of the peer",
			pkt:  ControlPacket{Diag: DiagAdminDown, State: StateAdminDown, DetectMult: 3, MyDiscriminator: 1},
			wire: "27 00 03 18 00000001 00000000 00000000 00000000 00000000",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := wire(t, tc.wire)
			got, err := tc.pkt.MarshalBinary()
			if err != nil {
				t.Fatalf("MarshalBinary: %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("MarshalBinary = %x, want %x", got, want)
			}
			var back ControlPacket
			if err := back.UnmarshalBinary(want); err != nil {
				t.Fatalf("UnmarshalBinary: %v", err)
			}
			if diff := cmp.Diff(tc.pkt, back); diff != "" {
				t.Errorf("UnmarshalBinary (-want +got):\n%s", diff)
			}
		})
	}
}

// TestControlPacketDropRules covers the session-independent reception
// checks of RFC 5880 §6.8.6.
func TestControlPacketDropRules(t *testing.T) {
	tests := []struct {
		name    string
		wire    string
		wantErr error
		wantMsg string
	}{
		{"too short for a header", "20 40 03 18 00000001 00000000 00000000 00000000 000000", ErrMalformed, "23 bytes"},
		{"version 0", "00 40 03 18 00000001 00000000 00000000 00000000 00000000", ErrMalformed, "version 0"},
		{"version 2", "40 40 03 18 00000001 00000000 00000000 00000000 00000000", ErrMalformed, "version 2"},
		{"length below 24", "20 40 03 17 00000001 00000000 00000000 00000000 00000000", ErrMalformed, "length field 23"},
		{"length beyond payload", "20 40 03 1a 00000001 00000000 00000000 00000000 00000000", ErrMalformed, "exceeds"},
		{"A bit with length 24", "20 44 03 18 00000001 00000000 00000000 00000000 00000000", ErrMalformed, "A bit"},
		{"detect mult 0", "20 40 00 18 00000001 00000000 00000000 00000000 00000000", ErrMalformed, "detect multiplier 0"},
		{"M bit", "20 41 03 18 00000001 00000000 00000000 00000000 00000000", ErrMalformed, "multipoint"},
		{"my discriminator 0", "20 40 03 18 00000000 00000000 00000000 00000000 00000000", ErrMalformed, "my discriminator 0"},
		{"your discriminator 0 in init", "20 80 03 18 00000001 00000000 00000000 00000000 00000000", ErrMalformed, "state Init"},
		{"your discriminator 0 in up", "20 c0 03 18 00000001 00000000 00000000 00000000 00000000", ErrMalformed, "state Up"},
		{"poll and final", "20 f0 03 18 00000001 00000002 00000000 00000000 00000000", ErrMalformed, "poll and final"},
		{"auth len beyond length", "20 44 03 1a 00000001 00000000 00000000 00000000 00000000 01 05", ErrMalformed, "auth len 5"},
		{"simple password", "20 44 03 1c 00000001 00000000 00000000 00000000 00000000 01 04 01 61", ErrAuthNotSupported, "simple password"},
		{"keyed sha1", "20 44 03 1c 00000001 00000000 00000000 00000000 00000000 04 04 01 00", ErrAuthNotSupported, "keyed SHA1"},
		{"valid, trailing bytes ignored", "20 40 03 18 00000001 00000000 00000000 00000000 00000000 ffff", nil, ""},
		{"valid down with your discriminator 0", "20 40 03 18 00000001 00000000 00000000 00000000 00000000", nil, ""},
		{"valid admin down with your discriminator 0", "20 00 03 18 00000001 00000000 00000000 00000000 00000000", nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var p ControlPacket
			err := p.UnmarshalBinary(wire(t, tc.wire))
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("UnmarshalBinary: %v, want success", err)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("UnmarshalBinary error = %v, want %v", err, tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("UnmarshalBinary error = %q, want it to mention %q", err, tc.wantMsg)
			}
		})
	}
}

func TestControlPacketMarshalRejects(t *testing.T) {
	tests := []struct {
		name string
		pkt  ControlPacket
		want string
	}{
		{"state beyond 2 bits", ControlPacket{State: 4}, "state 4"},
		{"diag beyond 5 bits", ControlPacket{Diag: 32}, "diag 32"},
		{"poll and final", ControlPacket{Poll: true, Final: true}, "poll and final"},
		{"negative interval", ControlPacket{DesiredMinTxInterval: -time.Second}, "desired min tx interval"},
		{"interval beyond 32 bits", ControlPacket{RequiredMinRxInterval: maxInterval + time.Microsecond}, "required min rx interval"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.pkt.MarshalBinary()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("MarshalBinary error = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

// FuzzControlPacket feeds arbitrary payloads to the parser: it must never
// panic, and whatever it accepts must survive a round trip unchanged.
func FuzzControlPacket(f *testing.F) {
	for _, s := range []string{
		"20 40 03 18 01020304 00000000 000f4240 000493e0 00000000",
		"20 e8 05 18 00000007 00000009 000186a0 00030d40 0000c350",
		"21 92 01 18 ffffffff 00000001 ffffffff 00000001 00000000",
		"20 44 03 1c 00000001 00000000 00000000 00000000 00000000 01 04 01 61",
		"20 40 03 1a 00000001 00000000 00000000 00000000 00000000 ffff",
	} {
		f.Add(wire(f, s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p ControlPacket
		if err := p.UnmarshalBinary(b); err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrAuthNotSupported) {
				t.Fatalf("UnmarshalBinary error %v wraps neither ErrMalformed nor ErrAuthNotSupported", err)
			}
			return
		}
		out, err := p.MarshalBinary()
		if err != nil {
			t.Fatalf("MarshalBinary of an accepted packet %+v: %v", p, err)
		}
		// Everything but the Length byte (always 24 on output) is kept.
		if !bytes.Equal(out[:3], b[:3]) || !bytes.Equal(out[4:], b[4:24]) {
			t.Fatalf("round trip changed the packet:\n in %x\nout %x", b[:24], out)
		}
		var again ControlPacket
		if err := again.UnmarshalBinary(out); err != nil {
			t.Fatalf("UnmarshalBinary of our own output %x: %v", out, err)
		}
		if diff := cmp.Diff(p, again); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}
