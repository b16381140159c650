package fastpath

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	fastpathbpf "github.com/novaedge/novaedge/gen/bpf/fastpath"
)

// Reading the program's statistics. A packet forwarded from the flow cache
// with XDP_TX is counted in its slot (struct flow_cache_entry's packets and
// bytes), not in fp_counters, fp_vip_stats and fp_backend_stats: the hit
// path then touches one cache line it already holds instead of five
// counters. The program adds a slot's counts to the maps when it writes the
// slot again, at the latest when the flow's copy is refreshed
// (TOUCH_INTERVAL_NS); until then readers add them. So every reader here
// reads the maps first and the flow cache after: a packet the program
// moves between the two reads is missed by that reading (and found by the
// next), never counted twice.

// pendingCounts is what the flow cache's slots counted and have not yet
// added to the maps. Each packet is one rx, one ct_hit and one tx, and one
// packet of its VIP's and of its backend's traffic.
type pendingCounts struct {
	packets  uint64
	vips     map[uint32]fastpathbpf.FastpathFpTraffic
	backends map[uint32]fastpathbpf.FastpathFpTraffic
}

// flowCacheBatch is how many slots one system call reads.
const flowCacheBatch = 4096

// readPending sums the counts held in the slots of an fp_flow_cache map (a
// nil map holds none).
func readPending(fc *ebpf.Map) (pendingCounts, error) {
	p := pendingCounts{
		vips:     make(map[uint32]fastpathbpf.FastpathFpTraffic),
		backends: make(map[uint32]fastpathbpf.FastpathFpTraffic),
	}
	if fc == nil {
		return p, nil
	}
	var (
		cursor ebpf.MapBatchCursor
		keys   = make([]uint32, flowCacheBatch)
		slots  = make([]fastpathbpf.FastpathFlowCacheEntry, flowCacheBatch)
	)
	for {
		n, err := fc.BatchLookup(&cursor, keys, slots, nil)
		for _, s := range slots[:n] {
			if s.Packets == 0 {
				continue
			}
			p.packets += uint64(s.Packets)
			addTraffic(p.vips, s.VipId, uint64(s.Packets), s.Bytes)
			addTraffic(p.backends, s.BackendId, uint64(s.Packets), s.Bytes)
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return p, nil
		}
		if err != nil {
			return p, fmt.Errorf("read %s: %w", fastpathbpf.FastpathMapFpFlowCache, err)
		}
	}
}

func addTraffic(m map[uint32]fastpathbpf.FastpathFpTraffic, id uint32, packets, bytes uint64) {
	t := m[id]
	t.Packets += packets
	t.Bytes += bytes
	m[id] = t
}

// ReadCounters sums the per-CPU counters of an fp_counters map, with the
// packets the slots of flowCache (its fp_flow_cache; nil for none) still
// hold added as rx, ct_hit and tx.
func ReadCounters(counters, flowCache *ebpf.Map) (map[string]uint64, error) {
	out := make(map[string]uint64)
	for c := fastpathbpf.FastpathFpCounter(0); c < fastpathbpf.FastpathFpCounterFP_C_MAX; c++ {
		var per []uint64
		if err := counters.Lookup(uint32(c), &per); err != nil {
			return nil, fmt.Errorf("read counter %d: %w", c, err)
		}
		var sum uint64
		for _, v := range per {
			sum += v
		}
		out[CounterName(c)] = sum
	}
	pending, err := readPending(flowCache)
	if err != nil {
		return nil, err
	}
	for _, c := range []fastpathbpf.FastpathFpCounter{
		fastpathbpf.FastpathFpCounterFP_C_RX, fastpathbpf.FastpathFpCounterFP_C_CT_HIT, fastpathbpf.FastpathFpCounterFP_C_TX,
	} {
		out[CounterName(c)] += pending.packets
	}
	return out, nil
}

// Counters returns every program counter summed over CPUs, by name.
func (o *Objects) Counters() (map[string]uint64, error) {
	return ReadCounters(o.FpCounters, o.FpFlowCache)
}

// readTraffic sums the per-CPU traffic of one ID in an fp_vip_stats or
// fp_backend_stats map.
func readTraffic(m *ebpf.Map, id uint32) (fastpathbpf.FastpathFpTraffic, error) {
	var per []fastpathbpf.FastpathFpTraffic
	var sum fastpathbpf.FastpathFpTraffic
	if err := m.Lookup(id, &per); err != nil {
		return sum, fmt.Errorf("read %s[%d]: %w", m.String(), id, err)
	}
	for _, t := range per {
		sum.Packets += t.Packets
		sum.Bytes += t.Bytes
	}
	return sum, nil
}

// VIPTraffic returns the packets and bytes VIP id received, the flow
// cache's pending counts included.
func (o *Objects) VIPTraffic(id uint32) (fastpathbpf.FastpathFpTraffic, error) {
	return trafficWithPending(o.FpVipStats, o.FpFlowCache, id, func(p pendingCounts) map[uint32]fastpathbpf.FastpathFpTraffic { return p.vips })
}

// BackendTraffic returns the packets and bytes sent to backend id, the
// flow cache's pending counts included.
func (o *Objects) BackendTraffic(id uint32) (fastpathbpf.FastpathFpTraffic, error) {
	return trafficWithPending(o.FpBackendStats, o.FpFlowCache, id, func(p pendingCounts) map[uint32]fastpathbpf.FastpathFpTraffic { return p.backends })
}

func trafficWithPending(stats, flowCache *ebpf.Map, id uint32, of func(pendingCounts) map[uint32]fastpathbpf.FastpathFpTraffic) (fastpathbpf.FastpathFpTraffic, error) {
	t, err := readTraffic(stats, id)
	if err != nil {
		return t, err
	}
	pending, err := readPending(flowCache)
	if err != nil {
		return t, err
	}
	p := of(pending)[id]
	t.Packets += p.Packets
	t.Bytes += p.Bytes
	return t, nil
}
