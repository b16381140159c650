package traffic

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf/link"

	benchbpf "github.com/novaedge/novaedge/gen/bpf/bench"
	"github.com/novaedge/novaedge/perf/xdpbench/topo"
)

// Sink counts and drops the frames arriving on the generator's veth.
type Sink struct {
	objs benchbpf.BenchsinkObjects
	link link.Link
}

// SinkCounts are the sink's counters, summed over CPUs.
type SinkCounts struct {
	// Matched frames went to the expected destination: forwarded ones.
	Matched uint64
	// Other frames went elsewhere or were not IPv4 UDP/TCP.
	Other uint64
}

// AttachSink loads the sink program and attaches it in native mode to
// ifname in namespace ns.
func AttachSink(ns, ifname string) (*Sink, error) {
	s := &Sink{}
	if err := benchbpf.LoadBenchsinkObjects(&s.objs, nil); err != nil {
		return nil, fmt.Errorf("load sink program: %w", err)
	}
	l, err := topo.AttachXDP(ns, ifname, s.objs.BenchSink, link.XDPDriverMode)
	if err != nil {
		_ = s.objs.Close()
		return nil, err
	}
	s.link = l
	return s, nil
}

// Expect sets the destination that counts as forwarded.
func (s *Sink) Expect(dst netip.Addr, port uint16) error {
	if !dst.Is4() {
		return fmt.Errorf("sink destination %s is not IPv4", dst)
	}
	a := dst.As4()
	// The program compares against network byte order as it lies in memory.
	if err := s.objs.SinkDaddr.Set(binary.NativeEndian.Uint32(a[:])); err != nil {
		return fmt.Errorf("set sink address: %w", err)
	}
	var p [2]byte
	binary.BigEndian.PutUint16(p[:], port)
	if err := s.objs.SinkDport.Set(binary.NativeEndian.Uint16(p[:])); err != nil {
		return fmt.Errorf("set sink port: %w", err)
	}
	return nil
}

// Counts returns the counters so far.
func (s *Sink) Counts() (SinkCounts, error) {
	var per []benchbpf.BenchsinkSinkStats
	if err := s.objs.SinkCounts.Lookup(uint32(0), &per); err != nil {
		return SinkCounts{}, fmt.Errorf("read sink counts: %w", err)
	}
	var c SinkCounts
	for _, p := range per {
		c.Matched += p.Matched
		c.Other += p.Other
	}
	return c, nil
}

// Close detaches and unloads the sink.
func (s *Sink) Close() error {
	return errors.Join(s.link.Close(), s.objs.Close())
}
