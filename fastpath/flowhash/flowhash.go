package flowhash

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// seed is FLOW_HASH_SEED of bpf/fastpath_consts.h.
const seed = 0x4e6f7661

// Flow is a 5-tuple in the client → VIP direction.
type Flow struct {
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16
	Proto            uint8
}

// Addr16 is an address as the fast path's maps hold it: IPv6 as is, IPv4
// in the first four bytes with the rest zero.
func Addr16(a netip.Addr) [16]byte {
	var b [16]byte
	if a.Is4() || a.Is4In6() {
		v4 := a.Unmap().As4()
		copy(b[:], v4[:])
		return b
	}
	return a.As16()
}

func mix(h, k uint32) uint32 {
	k *= 0xcc9e2d51
	k = bits.RotateLeft32(k, 15)
	k *= 0x1b873593
	h ^= k
	h = bits.RotateLeft32(h, 13)
	return h*5 + 0xe6546b64
}

// Hash returns the fast path's hash of f: MurmurHash3's mixing over the
// words of the addresses (little-endian loads of their bytes in network
// order), the ports ((src << 16) | dst) and the protocol.
func Hash(f Flow) uint32 {
	src, dst := Addr16(f.Src), Addr16(f.Dst)
	h := uint32(seed)
	for i := 0; i < 16; i += 4 {
		h = mix(h, binary.LittleEndian.Uint32(src[i:]))
	}
	for i := 0; i < 16; i += 4 {
		h = mix(h, binary.LittleEndian.Uint32(dst[i:]))
	}
	h = mix(h, uint32(f.SrcPort)<<16|uint32(f.DstPort))
	h = mix(h, uint32(f.Proto))
	h ^= 40
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}

// ClientHash returns the fast path's hash of a client address alone, which
// places the new flows of a VIP entry with client affinity (a Service's
// sessionAffinity ClientIP): every connection of a client maps to the same
// Maglev slot.
func ClientHash(src netip.Addr) uint32 {
	b := Addr16(src)
	h := uint32(seed)
	for i := 0; i < 16; i += 4 {
		h = mix(h, binary.LittleEndian.Uint32(b[i:]))
	}
	h ^= 16
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}
