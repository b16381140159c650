package ospfpkt

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
)

// hello builds an unauthenticated OSPFv2 Hello from router id in area.
func hello(id, area string, helloS uint16, deadS uint32) []byte {
	b := make([]byte, HeaderLen+helloFixedBodySize)
	b[0], b[1] = 2, TypeHello
	binary.BigEndian.PutUint16(b[2:4], uint16(len(b)))
	r, a := netip.MustParseAddr(id).As4(), netip.MustParseAddr(area).As4()
	copy(b[4:8], r[:])
	copy(b[8:12], a[:])
	body := b[HeaderLen:]
	copy(body[0:4], []byte{255, 255, 255, 0})
	binary.BigEndian.PutUint16(body[4:6], helloS)
	body[6], body[7] = 0x02, 1
	binary.BigEndian.PutUint32(body[8:12], deadS)
	return b
}

func TestMD5(t *testing.T) {
	pkt := SignMD5(hello("10.0.0.1", "0.0.0.0", 1, 4), 7, 42, "secret")
	for _, tc := range []struct {
		name string
		key  string
		want bool
	}{
		{"same key", "secret", true},
		{"other key", "secreT", false},
		{"key with trailing zero bytes is the same key", "secret\x00", true},
		{"empty key", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse(pkt)
			if err != nil {
				t.Fatal(err)
			}
			if p.KeyID != 7 || p.Seq != 42 || p.AuthType != AuthCryptographic {
				t.Fatalf("header: key id %d seq %d auth type %d", p.KeyID, p.Seq, p.AuthType)
			}
			if got := p.VerifyMD5(tc.key); got != tc.want {
				t.Fatalf("VerifyMD5(%q) = %v, want %v", tc.key, got, tc.want)
			}
		})
	}
	t.Run("tampered body", func(t *testing.T) {
		bad := append([]byte(nil), pkt...)
		bad[HeaderLen+5] ^= 1
		p, err := Parse(bad)
		if err != nil {
			t.Fatal(err)
		}
		if p.VerifyMD5("secret") {
			t.Fatal("a tampered packet verifies")
		}
	})
	t.Run("null authentication never verifies", func(t *testing.T) {
		p, err := Parse(hello("10.0.0.1", "0.0.0.0", 1, 4))
		if err != nil {
			t.Fatal(err)
		}
		if p.AuthType != AuthNull || p.VerifyMD5("") {
			t.Fatalf("auth type %d verifies", p.AuthType)
		}
	})
}

func TestParse(t *testing.T) {
	good := hello("10.0.0.1", "0.0.0.5", 3, 12)
	for _, tc := range []struct {
		name    string
		pkt     []byte
		wantErr bool
	}{
		{"hello", good, false},
		{"short header", good[:10], true},
		{"length beyond data", good[:HeaderLen+4], true},
		{"version 3", func() []byte { b := append([]byte(nil), good...); b[0] = 3; return b }(), true},
		{"md5 without digest", SignMD5(good, 1, 1, "k")[:len(good)], true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse(tc.pkt)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			h, err := ParseHello(p.Body)
			if err != nil {
				t.Fatal(err)
			}
			if p.RouterID.String() != "10.0.0.1" || p.Area.String() != "0.0.0.5" || h.HelloInterval != 3 || h.DeadInterval != 12 {
				t.Fatalf("decoded %+v %+v", p, h)
			}
		})
	}
	if _, err := ParseHello(make([]byte, 3)); !errors.Is(err, ErrShort) {
		t.Fatalf("short hello: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(hello("10.0.0.1", "0.0.0.0", 10, 40))
	f.Add(SignMD5(hello("10.0.0.1", "0.0.0.0", 10, 40), 1, 1, "k"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Parse(b)
		if err != nil {
			return
		}
		_ = p.VerifyMD5("k")
		_, _ = ParseHello(p.Body)
	})
}
