package lineage

import (
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
	if err := Validate(l); err != nil {
		return nil, err
	}
	ids := make([]uint32, len(l.GetBackends()))
	for i, k := range l.GetBackends() {
		if id, ok := idOf(k); ok {
			ids[i] = id
		}
	}
	t := make(maglev.Table, size)
	w := width(len(ids))
	r := bitReader{buf: l.GetSlots()}
	for s := range t {
		t[s] = ids[r.read(w)]
	}
	return t, nil
}

// Owners returns the backend ("address:port") owning each slot of l, for
// inspection and tests.
func Owners(l *pb.MaglevLineage) ([]string, error) {
	if err := Validate(l); err != nil {
		return nil, err
	}
	out := make([]string, l.GetSize())
	w := width(len(l.GetBackends()))
	r := bitReader{buf: l.GetSlots()}
	for s := range out {
		out[s] = l.GetBackends()[r.read(w)]
	}
	return out, nil
}

// Validate checks that l describes a table: a size within maglev.MaxSize
// (whether it is prime is the builder's business: a lineage of another size
// than the node's is ignored), backends that are sorted, unique, valid
// "address:port" strings, and exactly size slot indices, each naming a
// backend.
func Validate(l *pb.MaglevLineage) error {
	n := len(l.GetBackends())
	if l.GetSize() == 0 || l.GetSize() > maglev.MaxSize {
		return fmt.Errorf("%w: size %d is not in [1, %d]", ErrInvalid, l.GetSize(), maglev.MaxSize)
	}
	if n == 0 || n > MaxBackends {
		return fmt.Errorf("%w: %d backends, want 1 to %d", ErrInvalid, n, MaxBackends)
	}
	for i, k := range l.GetBackends() {
		if _, err := netip.ParseAddrPort(k); err != nil {
			return fmt.Errorf("%w: backends[%d]: %w", ErrInvalid, i, err)
		}
		if i > 0 && l.GetBackends()[i-1] >= k {
			return fmt.Errorf("%w: backends[%d] %q is not after %q (sorted, unique)", ErrInvalid, i, k, l.GetBackends()[i-1])
		}
	}
	w := width(n)
	if want := (uint64(l.GetSize())*uint64(w) + 7) / 8; uint64(len(l.GetSlots())) != want {
		return fmt.Errorf("%w: slots has %d bytes, want %d (%d slots of %d bits)", ErrInvalid, len(l.GetSlots()), want, l.GetSize(), w)
	}
	r := bitReader{buf: l.GetSlots()}
	for s := range l.GetSize() {
		if i := r.read(w); int(i) >= n {
			return fmt.Errorf("%w: slot %d names backend %d of %d", ErrInvalid, s, i, n)
		}
	}
	return nil
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
	var lookup func(id uint32) (int, bool)
	if int(maxID) <= 4*len(members)+64 {
		pos := make([]int32, maxID+1)
		for i, m := range members {
			pos[m.ID] = int32(i) + 1
		}
		lookup = func(id uint32) (int, bool) {
			if id > maxID || pos[id] == 0 {
				return 0, false
			}
			return int(pos[id]) - 1, true
		}
	} else {
		pos := make(map[uint32]int, len(members))
		for i, m := range members {
			pos[m.ID] = i
		}
		lookup = func(id uint32) (int, bool) { i, ok := pos[id]; return i, ok }
	}
	owner := make([]int32, len(t)) // member index per slot
	owns := make([]bool, len(members))
	for s, id := range t {
		i, ok := lookup(id)
		if !ok {
			return nil, fmt.Errorf("%w: slot %d names ID %d, which no member has", ErrInvalid, s, id)
		}
		owner[s] = int32(i)
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
	index := make([]uint64, len(members))
	for i, m := range members {
		if owns[i] {
			j, _ := slices.BinarySearch(keys, m.Key)
			index[i] = uint64(j)
		}
	}
	w := width(len(keys))
	bw := bitWriter{buf: make([]byte, 0, (len(t)*int(w)+7)/8)}
	for _, i := range owner {
		bw.write(index[i], w)
	}
	return &pb.MaglevLineage{Size: uint32(len(t)), Backends: keys, Slots: bw.flush()}, nil
}

// width is the bits per slot for n backends: enough for n-1, at least 1.
func width(n int) uint {
	return uint(max(1, bits.Len(uint(n-1))))
}

type bitReader struct {
	buf  []byte
	acc  uint64
	have uint
	pos  int
}

func (r *bitReader) read(w uint) uint64 {
	for r.have < w {
		var b byte
		if r.pos < len(r.buf) {
			b = r.buf[r.pos]
		}
		r.pos++
		r.acc |= uint64(b) << r.have
		r.have += 8
	}
	v := r.acc & (1<<w - 1)
	r.acc >>= w
	r.have -= w
	return v
}

type bitWriter struct {
	buf  []byte
	acc  uint64
	have uint
}

func (bw *bitWriter) write(v uint64, w uint) {
	bw.acc |= v << bw.have
	bw.have += w
	for bw.have >= 8 {
		bw.buf = append(bw.buf, byte(bw.acc))
		bw.acc >>= 8
		bw.have -= 8
	}
}

func (bw *bitWriter) flush() []byte {
	if bw.have > 0 {
		bw.buf = append(bw.buf, byte(bw.acc))
		bw.acc, bw.have = 0, 0
	}
	return bw.buf
}
