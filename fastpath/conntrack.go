package fastpath

import (
	"fmt"

	"github.com/cilium/ebpf"

	fastpathbpf "github.com/novaedge/novaedge/gen/bpf/fastpath"
)

// Conntrack lives in two maps: IPv4 flows in fp_conntrack4 under a 16-byte
// key (struct flow_key4, which the kernel hashes in well under half the
// time of the 40-byte struct flow_key), IPv6 flows in fp_conntrack. The
// functions here take and return struct flow_key for both, so callers see
// one table.

// ctKey4 returns the fp_conntrack4 key of an IPv4 flow key; ok is false
// for a key of another family.
func ctKey4(k fastpathbpf.FastpathFlowKey) (k4 fastpathbpf.FastpathFlowKey4, ok bool) {
	if k.Family != uint8(fastpathbpf.FastpathFpFamilyFP_FAMILY_IPV4) {
		return k4, false
	}
	copy(k4.Src[:], k.Src[:4])
	copy(k4.Dst[:], k.Dst[:4])
	k4.Sport, k4.Dport, k4.Proto = k.Sport, k.Dport, k.Proto
	return k4, true
}

// flowKeyOf4 turns an fp_conntrack4 key back into the IPv4 flow key.
func flowKeyOf4(k4 fastpathbpf.FastpathFlowKey4) fastpathbpf.FastpathFlowKey {
	k := fastpathbpf.FastpathFlowKey{
		Sport: k4.Sport, Dport: k4.Dport, Proto: k4.Proto,
		Family: uint8(fastpathbpf.FastpathFpFamilyFP_FAMILY_IPV4),
	}
	copy(k.Src[:], k4.Src[:])
	copy(k.Dst[:], k4.Dst[:])
	return k
}

// LookupConntrack reads the tracked flow of k into v from the conntrack
// map of k's family. A flow that is not tracked gives ebpf.ErrKeyNotExist.
func (o *Objects) LookupConntrack(k fastpathbpf.FastpathFlowKey, v *fastpathbpf.FastpathCtValue) error {
	if k4, ok := ctKey4(k); ok {
		return o.FpConntrack4.Lookup(&k4, v)
	}
	return o.FpConntrack.Lookup(&k, v)
}

// PutConntrack writes a tracked flow (tests and tools; the program creates
// its own entries).
func (o *Objects) PutConntrack(k fastpathbpf.FastpathFlowKey, v fastpathbpf.FastpathCtValue) error {
	if k4, ok := ctKey4(k); ok {
		return o.FpConntrack4.Put(&k4, &v)
	}
	return o.FpConntrack.Put(&k, &v)
}

// RangeConntrack calls fn for every tracked flow, IPv4 first, until fn
// returns false.
func (o *Objects) RangeConntrack(fn func(fastpathbpf.FastpathFlowKey, fastpathbpf.FastpathCtValue) bool) error {
	return rangeConntrack(o.FpConntrack4, o.FpConntrack, fn)
}

func rangeConntrack(v4, v6 *ebpf.Map, fn func(fastpathbpf.FastpathFlowKey, fastpathbpf.FastpathCtValue) bool) error {
	var (
		k4 fastpathbpf.FastpathFlowKey4
		k  fastpathbpf.FastpathFlowKey
		v  fastpathbpf.FastpathCtValue
	)
	it := v4.Iterate()
	for it.Next(&k4, &v) {
		if !fn(flowKeyOf4(k4), v) {
			return nil
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read %s: %w", fastpathbpf.FastpathMapFpConntrack4, err)
	}
	it = v6.Iterate()
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
