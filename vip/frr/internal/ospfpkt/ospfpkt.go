// Package ospfpkt decodes OSPFv2 packets (RFC 2328 A.3) far enough to
// check what a neighbour sends against the local settings: the common
// header, cryptographic authentication (D.3, keyed MD5) and the Hello
// body. It never trusts lengths it has not checked.
package ospfpkt

import (
	"crypto/md5"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// HeaderLen is the length of the OSPFv2 common header.
const HeaderLen = 24

// Packet types.
const (
	TypeHello = 1
)

// Authentication types (RFC 2328 D.3).
const (
	AuthNull           = 0
	AuthSimple         = 1
	AuthCryptographic  = 2
	md5DigestLen       = 16
	helloFixedBodySize = 20
)

// Packet is a decoded OSPFv2 packet.
type Packet struct {
	Version  uint8
	Type     uint8
	RouterID netip.Addr
	Area     netip.Addr
	AuthType uint16
	// KeyID and Seq are set for cryptographic authentication.
	KeyID uint8
	Seq   uint32
	// Body is the packet after the common header, up to its length.
	Body []byte
	// signed is the header and body the digest covers; digest the
	// appended digest (cryptographic authentication only).
	signed, digest []byte
}

// ErrShort is returned for a packet too short for what it claims.
var ErrShort = errors.New("ospf packet truncated")

// Parse decodes an OSPFv2 packet without its IP header.
func Parse(b []byte) (Packet, error) {
	if len(b) < HeaderLen {
		return Packet{}, ErrShort
	}
	p := Packet{
		Version:  b[0],
		Type:     b[1],
		RouterID: netip.AddrFrom4([4]byte(b[4:8])),
		Area:     netip.AddrFrom4([4]byte(b[8:12])),
		AuthType: binary.BigEndian.Uint16(b[14:16]),
	}
	if p.Version != 2 {
		return Packet{}, fmt.Errorf("ospf version %d: only version 2 is decoded", p.Version)
	}
	n := int(binary.BigEndian.Uint16(b[2:4]))
	if n < HeaderLen || n > len(b) {
		return Packet{}, fmt.Errorf("ospf packet length %d of %d bytes: %w", n, len(b), ErrShort)
	}
	p.Body = b[HeaderLen:n]
	if p.AuthType == AuthCryptographic {
		p.KeyID = b[18]
		dl := int(b[19])
		p.Seq = binary.BigEndian.Uint32(b[20:24])
		if dl != md5DigestLen {
			return Packet{}, fmt.Errorf("ospf cryptographic authentication data length %d: only md5 (16) is known", dl)
		}
		if len(b) < n+dl {
			return Packet{}, fmt.Errorf("ospf md5 digest missing: %w", ErrShort)
		}
		p.signed, p.digest = b[:n], b[n:n+dl]
	}
	return p, nil
}

// VerifyMD5 reports whether the packet's md5 digest was made with key
// (RFC 2328 D.4.3: MD5 over the packet and the key padded to 16 bytes).
// It is false for packets without cryptographic authentication.
func (p Packet) VerifyMD5(key string) bool {
	if p.AuthType != AuthCryptographic || len(p.digest) != md5DigestLen {
		return false
	}
	sum := md5Digest(p.signed, key)
	return subtle.ConstantTimeCompare(sum[:], p.digest) == 1
}

func md5Digest(signed []byte, key string) [16]byte {
	var k [16]byte
	copy(k[:], key)
	h := md5.New()
	h.Write(signed)
	h.Write(k[:])
	var out [16]byte
	copy(out[:], h.Sum(nil))
	return out
}

// SignMD5 fills in the header of an OSPFv2 packet built without
// authentication (header and body, length field set) for cryptographic
// authentication and returns it with the digest appended. It is how a
// test makes a neighbour's packet.
func SignMD5(pkt []byte, keyID uint8, seq uint32, key string) []byte {
	out := append([]byte(nil), pkt...)
	binary.BigEndian.PutUint16(out[12:14], 0) // no checksum with cryptographic authentication
	binary.BigEndian.PutUint16(out[14:16], AuthCryptographic)
	out[16], out[17], out[18], out[19] = 0, 0, keyID, md5DigestLen
	binary.BigEndian.PutUint32(out[20:24], seq)
	sum := md5Digest(out, key)
	return append(out, sum[:]...)
}

// Hello is the fixed part of a Hello body (RFC 2328 A.3.2).
type Hello struct {
	NetworkMask   netip.Addr
	HelloInterval uint16
	Options       uint8
	Priority      uint8
	DeadInterval  uint32
}

// ParseHello decodes the fixed part of a Hello body.
func ParseHello(body []byte) (Hello, error) {
	if len(body) < helloFixedBodySize {
		return Hello{}, fmt.Errorf("ospf hello of %d bytes: %w", len(body), ErrShort)
	}
	return Hello{
		NetworkMask:   netip.AddrFrom4([4]byte(body[0:4])),
		HelloInterval: binary.BigEndian.Uint16(body[4:6]),
		Options:       body[6],
		Priority:      body[7],
		DeadInterval:  binary.BigEndian.Uint32(body[8:12]),
	}, nil
}
