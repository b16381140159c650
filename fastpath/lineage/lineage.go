package lineage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"

	"github.com/novaedge/novaedge/fastpath/maglev"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// MaxBackends bounds the backends a lineage names: 16 bits per slot.
const MaxBackends = 1 << 16

// ErrInvalid reports a lineage that does not describe a table.
var ErrInvalid = errors.New("invalid maglev lineage")

// MinBackends is how many backends with a weight an entry needs before it
// gets a lineage. Below it a rebuild from scratch is already close to
// minimal (removing one of 20 backends moves 5.3 % of the slots against an
// ideal 5 %; one of 1 000 moves 0.96 % against 0.1 %), and a lineage
// costs the snapshot 33 KB (10 backends) to 98 KB (1 000) per entry.
const MinBackends = 64

// Wanted says whether an entry whose members are these should carry a
// lineage, given whether it has one: from MinBackends live members on, and
// once it has one, until fewer than half that many are left. The
// hysteresis keeps an entry near the threshold from switching back and
// forth, since each switch to a table built from scratch moves the slots
// the lineage had saved.
func Wanted(has bool, members []maglev.Backend) bool {
	live := 0
	for _, m := range members {
		if m.Weight > 0 {
			live++
		}
	}
	if has {
		return live >= MinBackends/2
	}
	return live >= MinBackends
}

// Member is the table member of one endpoint of a FAST entry, as the fast
// path installs it: a draining endpoint keeps weight 0 (no new flows), any
// other endpoint without a weight counts as 1. The key is the endpoint's
// "address:port" with an IPv4-mapped IPv6 address unmapped.
func Member(addr netip.Addr, port uint16, weight uint32, draining bool) maglev.Backend {
	switch {
	case draining:
		weight = 0
	case weight == 0:
		weight = 1
	}
	return maglev.Backend{Key: netip.AddrPortFrom(addr.Unmap(), port).String(), Weight: weight}
}

// Members returns the table members of a FAST plan entry: every endpoint
// but the unhealthy ones, through Member, with IDs 1, 2, … in endpoint
// order. It fails on an endpoint whose address or port is not valid.
func Members(e *pb.PlanEntry) ([]maglev.Backend, error) {
	var out []maglev.Backend
	for i, ep := range e.GetEndpoints() {
		if ep.GetState() == pb.EndpointState_ENDPOINT_STATE_UNHEALTHY {
			continue
		}
		a, err := netip.ParseAddr(ep.GetAddress())
		if err != nil || ep.GetPort() > 0xffff {
			return nil, fmt.Errorf("endpoints[%d]: address %q port %d is not valid", i, ep.GetAddress(), ep.GetPort())
		}
		m := Member(a, uint16(ep.GetPort()), ep.GetWeight(), ep.GetState() == pb.EndpointState_ENDPOINT_STATE_DRAINING)
		m.ID = uint32(len(out) + 1)
		out = append(out, m)
	}
	return out, nil
}

// Prev decodes l into a table of size slots in the caller's ID space: a
// slot owned by a backend idOf knows gets its ID, any other slot 0 (which
// maglev.BuildFrom treats as free, since no member has ID 0). It returns
// nil, without error, for a nil lineage or one of another size, which
// BuildFrom takes as "no lineage".
func Prev(l *pb.MaglevLineage, size uint32, idOf func(key string) (uint32, bool)) (maglev.Table, error) {
	if l == nil || l.GetSize() != size {
		return nil, nil
	}
	t, err := indices(l)
	if err != nil {
		return nil, err
	}
	ids := make([]uint32, len(l.GetBackends()))
	for i, k := range l.GetBackends() {
		if id, ok := idOf(k); ok {
			ids[i] = id
		}
	}
	for s, i := range t {
		t[s] = ids[i]
	}
	return t, nil
}

// Owners returns the backend ("address:port") owning each slot of l, for
// inspection and tests.
func Owners(l *pb.MaglevLineage) ([]string, error) {
	idx, err := indices(l)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(idx))
	for s, i := range idx {
		out[s] = l.GetBackends()[i]
	}
	return out, nil
}

// Validate checks that l describes a table: a size within maglev.MaxSize
// (whether it is prime is the builder's business: a lineage of another size
// than the node's is ignored), backends that are sorted, unique, valid
// "address:port" strings, and exactly size slot indices, each naming a
// backend.
func Validate(l *pb.MaglevLineage) error {
	_, err := indices(l)
	return err
}

// indices validates l (see Validate) and returns its slots' backend
// indices.
func indices(l *pb.MaglevLineage) ([]uint32, error) {
	n := len(l.GetBackends())
	if l.GetSize() == 0 || l.GetSize() > maglev.MaxSize {
		return nil, fmt.Errorf("%w: size %d is not in [1, %d]", ErrInvalid, l.GetSize(), maglev.MaxSize)
	}
	if n == 0 || n > MaxBackends {
		return nil, fmt.Errorf("%w: %d backends, want 1 to %d", ErrInvalid, n, MaxBackends)
	}
	for i, k := range l.GetBackends() {
		if _, err := netip.ParseAddrPort(k); err != nil {
			return nil, fmt.Errorf("%w: backends[%d]: %w", ErrInvalid, i, err)
		}
		if i > 0 && l.GetBackends()[i-1] >= k {
			return nil, fmt.Errorf("%w: backends[%d] %q is not after %q (sorted, unique)", ErrInvalid, i, k, l.GetBackends()[i-1])
		}
	}
	w := width(n)
	if want := (uint64(l.GetSize())*uint64(w) + 7) / 8; uint64(len(l.GetSlots())) != want {
		return nil, fmt.Errorf("%w: slots has %d bytes, want %d (%d slots of %d bits)", ErrInvalid, len(l.GetSlots()), want, l.GetSize(), w)
	}
	out := make([]uint32, l.GetSize())
	if s := unpack(l.GetSlots(), w, uint32(n), out); s >= 0 {
		return nil, fmt.Errorf("%w: slot %d names backend %d of %d", ErrInvalid, s, out[s], n)
	}
	return out, nil
}

// Next builds the table that follows prev for members (IDs as Members
// gives them) and returns it as a lineage: what every node builds from prev
// and members, and what the leader persists as the next prev. It returns
// nil, without error, when no member has a weight: such a table is all
// empty and has nothing to carry on.
func Next(b *maglev.Builder, prev *pb.MaglevLineage, members []maglev.Backend) (*pb.MaglevLineage, error) {
	byKey := make(map[string]uint32, len(members))
	live := false
	for _, m := range members {
		byKey[m.Key] = m.ID
		live = live || m.Weight > 0
	}
	if !live {
		return nil, nil
	}
	pt, err := Prev(prev, b.Size(), func(k string) (uint32, bool) { id, ok := byKey[k]; return id, ok })
	if err != nil {
		return nil, err
	}
	t, err := b.BuildFrom(pt, members)
	if err != nil {
		return nil, err
	}
	return Encode(t, members)
}

// Encode returns t, whose IDs are those of members, as a lineage naming the
// members that own at least one slot.
func Encode(t maglev.Table, members []maglev.Backend) (*pb.MaglevLineage, error) {
	// Slot owners are looked up by ID 65 537 times: through a slice when
	// the IDs are small, as Members makes them.
	var maxID uint32
	for _, m := range members {
		maxID = max(maxID, m.ID)
	}
	owner := make([]int32, len(t)) // member index per slot
	if int(maxID) <= 4*len(members)+64 {
		pos := make([]int32, maxID+1)
		for i, m := range members {
			pos[m.ID] = int32(i) + 1
		}
		for s, id := range t {
			if id > maxID || pos[id] == 0 {
				return nil, fmt.Errorf("%w: slot %d names ID %d, which no member has", ErrInvalid, s, id)
			}
			owner[s] = pos[id] - 1
		}
	} else {
		pos := make(map[uint32]int32, len(members))
		for i, m := range members {
			pos[m.ID] = int32(i)
		}
		for s, id := range t {
			i, ok := pos[id]
			if !ok {
				return nil, fmt.Errorf("%w: slot %d names ID %d, which no member has", ErrInvalid, s, id)
			}
			owner[s] = i
		}
	}
	owns := make([]bool, len(members))
	for _, i := range owner {
		owns[i] = true
	}
	var keys []string
	for i, m := range members {
		if owns[i] {
			keys = append(keys, m.Key)
		}
	}
	if len(keys) > MaxBackends {
		return nil, fmt.Errorf("%w: %d backends own slots, at most %d can be named", ErrInvalid, len(keys), MaxBackends)
	}
	slices.Sort(keys)
	index := make([]uint32, len(members))
	for i, m := range members {
		if owns[i] {
			j, _ := slices.BinarySearch(keys, m.Key)
			index[i] = uint32(j)
		}
	}
	return &pb.MaglevLineage{Size: uint32(len(t)), Backends: keys, Slots: pack(owner, index, width(len(keys)))}, nil
}

// width is the bits per slot for n backends: enough for n-1, at least 1.
func width(n int) uint {
	return uint(max(1, bits.Len(uint(n-1))))
}

// pack writes index[owner[s]] for every slot s in w bits (w ≤ 16), least
// significant bit first.
func pack(owner []int32, index []uint32, w uint) []byte {
	size := (len(owner)*int(w) + 7) / 8
	buf := make([]byte, 0, size+4)
	var acc uint64
	have := uint(0)
	for _, o := range owner {
		acc |= uint64(index[o]) << have
		have += w
		if have >= 32 {
			buf = binary.LittleEndian.AppendUint32(buf, uint32(acc))
			acc >>= 32
			have -= 32
		}
	}
	for ; have > 0; have -= min(have, 8) {
		buf = append(buf, byte(acc))
		acc >>= 8
	}
	return buf[:size:size]
}

// unpack reads len(out) values of w bits (w ≤ 16) from buf into out and
// returns the first slot whose value is not below limit, or -1.
func unpack(buf []byte, w uint, limit uint32, out []uint32) int {
	mask := uint64(1)<<w - 1
	pos := uint(0)
	bad := -1
	for s := range out {
		off := pos >> 3
		var v uint64
		if off+8 <= uint(len(buf)) {
			v = binary.LittleEndian.Uint64(buf[off:])
		} else {
			var tail [8]byte
			copy(tail[:], buf[off:])
			v = binary.LittleEndian.Uint64(tail[:])
		}
		x := uint32(v >> (pos & 7) & mask)
		out[s] = x
		if x >= limit && bad < 0 {
			bad = s
		}
		pos += w
	}
	return bad
}
