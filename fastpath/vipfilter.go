package fastpath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/novaedge/novaedge/fastpath/flowhash"
)

// vipFilterBits is VIP_FILTER_BITS of bpf/fastpath_consts.h: the size of
// fp_vip_filter in bits (64 per array entry).
const vipFilterBits = 65536

// vipFilter is the content of fp_vip_filter: one bit per TCP/UDP VIP entry,
// which lets the program pass other traffic to the kernel without a VIP or
// conntrack lookup.
type vipFilter [vipFilterBits / 64]uint64

// vipFilterBit is the program's vip_filter_bit: the bit of a VIP entry
// (port 0 for a whole-VIP entry). The address's four little-endian words
// are folded, then mixed with port, protocol and family by MurmurHash3's
// finaliser.
func vipFilterBit(addr netip.Addr, port uint16, proto uint8) uint32 {
	a := flowhash.Addr16(addr)
	x := binary.LittleEndian.Uint32(a[0:]) ^ binary.LittleEndian.Uint32(a[4:]) ^
		binary.LittleEndian.Uint32(a[8:]) ^ binary.LittleEndian.Uint32(a[12:])
	x = x*0x9e3779b1 ^ (uint32(port)<<16 | uint32(proto)<<8 | uint32(familyOf(addr)))
	x ^= x >> 16
	x *= 0x85ebca6b
	x ^= x >> 13
	x *= 0xc2b2ae35
	x ^= x >> 16
	return x & (vipFilterBits - 1)
}

// set sets the bit of the VIP entry k.
func (f *vipFilter) set(k vipKey) {
	b := vipFilterBit(k.addr, k.port, k.proto)
	f[b/64] |= 1 << (b % 64)
}

// union returns the bits set in f or g.
func (f *vipFilter) union(g *vipFilter) *vipFilter {
	u := *f
	for i := range u {
		u[i] |= g[i]
	}
	return &u
}

// readVIPFilter reads fp_vip_filter (pinned by an earlier agent, or new
// and zero).
func readVIPFilter(m *ebpf.Map) (*vipFilter, error) {
	f := new(vipFilter)
	for i := range f {
		if err := m.Lookup(uint32(i), &f[i]); err != nil {
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				return nil, fmt.Errorf("fp_vip_filter has %d entries, want %d", i, len(f))
			}
			return nil, fmt.Errorf("read fp_vip_filter word %d: %w", i, err)
		}
	}
	return f, nil
}

// writeVIPFilter makes fp_vip_filter, which holds from, hold to: only the
// words that differ are written, one at a time, so the program sees each
// word either as it was or as it will be.
func writeVIPFilter(m *ebpf.Map, from, to *vipFilter) error {
	for i := range to {
		if from[i] == to[i] {
			continue
		}
		if err := m.Put(uint32(i), to[i]); err != nil {
			return fmt.Errorf("write fp_vip_filter word %d: %w", i, err)
		}
	}
	return nil
}
