package fastpath

import (
	"encoding/binary"
	"fmt"

	"github.com/cilium/ebpf"

	fastpathbpf "github.com/novaedge/novaedge/gen/bpf/fastpath"
)

// Conntrack lives in three maps: IPv4 TCP flows in fp_ct4_tcp and IPv4 UDP
// flows in fp_ct4_udp, under a 12-byte key without family or protocol
// (struct flow_key4, which the kernel hashes in a fraction of the time of
// the 40-byte struct flow_key), and IPv6 flows in fp_conntrack. The
// functions here take and return struct flow_key for all, so callers see
// one table.

// ct4Map returns the map of IPv4 flows of proto among tcp and udp, and its
// name; nil for a protocol the program tracks no flows of.
func ct4Map(proto uint8, tcp, udp *ebpf.Map) (*ebpf.Map, string) {
	switch proto {
	case ProtoTCP:
		return tcp, fastpathbpf.FastpathMapFpCt4Tcp
	case ProtoUDP:
		return udp, fastpathbpf.FastpathMapFpCt4Udp
	}
	return nil, ""
}

// ctKey4 returns the fp_ct4_tcp / fp_ct4_udp key of an IPv4 flow key; ok is
// false for a key of another family.
func ctKey4(k fastpathbpf.FastpathFlowKey) (k4 fastpathbpf.FastpathFlowKey4, ok bool) {
	if k.Family != uint8(fastpathbpf.FastpathFpFamilyFP_FAMILY_IPV4) {
		return k4, false
	}
	copy(k4.Src[:], k.Src[:4])
	copy(k4.Dst[:], k.Dst[:4])
	k4.Sport, k4.Dport = k.Sport, k.Dport
	return k4, true
}

// flowKeyOf4 turns an IPv4 conntrack key of protocol proto back into the
// flow key.
func flowKeyOf4(k4 fastpathbpf.FastpathFlowKey4, proto uint8) fastpathbpf.FastpathFlowKey {
	k := fastpathbpf.FastpathFlowKey{
		Sport: k4.Sport, Dport: k4.Dport, Proto: proto,
		Family: uint8(fastpathbpf.FastpathFpFamilyFP_FAMILY_IPV4),
	}
	copy(k.Src[:], k4.Src[:])
	copy(k.Dst[:], k4.Dst[:])
	return k
}

// errCTProto is returned for an IPv4 flow key of a protocol without
// conntrack (only TCP and UDP flows are tracked).
func errCTProto(proto uint8) error {
	return fmt.Errorf("flow key proto %d: only TCP (%d) and UDP (%d) flows are tracked", proto, ProtoTCP, ProtoUDP)
}

// LookupConntrack reads the tracked flow of k into v from the conntrack
// map of k's family (and protocol). A flow that is not tracked gives
// ebpf.ErrKeyNotExist.
func (o *Objects) LookupConntrack(k fastpathbpf.FastpathFlowKey, v *fastpathbpf.FastpathCtValue) error {
	if k4, ok := ctKey4(k); ok {
		m, _ := ct4Map(k.Proto, o.FpCt4Tcp, o.FpCt4Udp)
		if m == nil {
			return errCTProto(k.Proto)
		}
		return m.Lookup(&k4, v)
	}
	return o.FpConntrack.Lookup(&k, v)
}

// PutConntrack writes a tracked flow (tests and tools; the program creates
// its own entries), and drops the program's copies of an IPv4 flow's entry
// (the flow cache), so that the flow's next packet sees what was written.
func (o *Objects) PutConntrack(k fastpathbpf.FastpathFlowKey, v fastpathbpf.FastpathCtValue) error {
	if k4, ok := ctKey4(k); ok {
		m, _ := ct4Map(k.Proto, o.FpCt4Tcp, o.FpCt4Udp)
		if m == nil {
			return errCTProto(k.Proto)
		}
		if err := m.Put(&k4, &v); err != nil {
			return err
		}
		return o.dropFlowCopy(k)
	}
	return o.FpConntrack.Put(&k, &v)
}

// flowCacheSlot is the program's flow_cache_slot: the fp_flow_cache slot
// of an IPv4 flow in a cache of 2^bits slots.
func flowCacheSlot(k fastpathbpf.FastpathFlowKey, bits uint32) uint32 {
	// The program loads the address words as they lie in memory.
	x := binary.NativeEndian.Uint32(k.Src[:4])*0x9e3779b1 ^ binary.NativeEndian.Uint32(k.Dst[:4])
	x ^= (uint32(k.Sport)<<16 | uint32(k.Dport)) * 0x85ebca6b
	x = (x ^ uint32(k.Proto)) * 0xc2b2ae35
	return x >> ((32 - bits) & 31)
}

// flowCacheIndexes returns the fp_flow_cache indexes of an IPv4 flow's
// slot, one per possible CPU: the map holds each CPU's part of 2^bits
// slots, CPU c's from c<<bits (the program's flow_cache_index).
func flowCacheIndexes(k fastpathbpf.FastpathFlowKey, bits uint32) ([]uint32, error) {
	n, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("count possible CPUs: %w", err)
	}
	slot := flowCacheSlot(k, bits)
	idx := make([]uint32, n)
	for c := range idx {
		idx[c] = uint32(c)<<bits | slot
	}
	return idx, nil
}

// dropFlowCopy clears, on every CPU, the flow cache slot of an IPv4 flow.
// The packets a slot counted and has not yet added to the counters stay
// in it with their VIP and backend (see stats.go); a packet the program
// counts between the read and the write here is lost to the counters.
func (o *Objects) dropFlowCopy(k fastpathbpf.FastpathFlowKey) error {
	if o.FlowCacheBits == 0 {
		return nil
	}
	idx, err := flowCacheIndexes(k, o.FlowCacheBits)
	if err != nil {
		return fmt.Errorf("drop flow cache copy: %w", err)
	}
	for _, i := range idx {
		var old fastpathbpf.FastpathFlowCacheEntry
		if err := o.FpFlowCache.Lookup(i, &old); err != nil {
			return fmt.Errorf("drop flow cache copy: %w", err)
		}
		empty := fastpathbpf.FastpathFlowCacheEntry{Packets: old.Packets, Bytes: old.Bytes}
		if old.Packets != 0 {
			empty.VipId, empty.BackendId = old.VipId, old.BackendId
		}
		if err := o.FpFlowCache.Put(i, empty); err != nil {
			return fmt.Errorf("drop flow cache copy: %w", err)
		}
	}
	return nil
}

// RangeConntrack calls fn for every tracked flow, IPv4 (TCP, then UDP)
// first, until fn returns false.
func (o *Objects) RangeConntrack(fn func(fastpathbpf.FastpathFlowKey, fastpathbpf.FastpathCtValue) bool) error {
	return rangeConntrack(o.FpCt4Tcp, o.FpCt4Udp, o.FpConntrack, fn)
}

func rangeConntrack(tcp4, udp4, v6 *ebpf.Map, fn func(fastpathbpf.FastpathFlowKey, fastpathbpf.FastpathCtValue) bool) error {
	var (
		k4 fastpathbpf.FastpathFlowKey4
		k  fastpathbpf.FastpathFlowKey
		v  fastpathbpf.FastpathCtValue
	)
	for _, proto := range []uint8{ProtoTCP, ProtoUDP} {
		m, name := ct4Map(proto, tcp4, udp4)
		it := m.Iterate()
		for it.Next(&k4, &v) {
			if !fn(flowKeyOf4(k4, proto), v) {
				return nil
			}
		}
		if err := it.Err(); err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
	}
	it := v6.Iterate()
	for it.Next(&k, &v) {
		if !fn(k, v) {
			return nil
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read %s: %w", fastpathbpf.FastpathMapFpConntrack, err)
	}
	return nil
}
