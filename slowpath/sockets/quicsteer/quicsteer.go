// Package quicsteer keeps HTTP/3 connections alive across an agent restart.
// The old and the new agent process each have their own UDP socket in one
// SO_REUSEPORT group; an SK_REUSEPORT program (bpf/quicsteer.bpf.c) picks,
// for every datagram, the socket of the process that owns the QUIC
// connection it belongs to. Ownership is written into the connection IDs:
// a process of generation g issues only IDs whose first byte is g
// (ConnIDGenerator), and puts its socket at index g of the group's socket
// array. New connections (Initial and 0-RTT packets) go to the newest
// generation, so the old process keeps its connections until they end and
// the new one takes every new one.
//
// One Group (program, socket array, newest-generation slot) serves one UDP
// address. A process passes its Group's descriptors to its successor
// together with the socket (see slowpath/sockets' handoff), so both update
// the same maps; nothing is pinned, and the kernel frees the program and
// maps when the last socket of the group and the last descriptor close.
package quicsteer

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"

	"github.com/cilium/ebpf"
	"github.com/quic-go/quic-go"

	quicsteerbpf "github.com/novaedge/novaedge/gen/bpf/quicsteer"
	"github.com/novaedge/novaedge/slowpath/sockets/internal/reuseport"
)

// CIDLen is the length of the connection IDs a ConnIDGenerator issues;
// the program only steers long-header packets whose destination ID has
// this length (QUICSTEER_CID_LEN in bpf/quicsteer_consts.h).
const CIDLen = 8

// ConnIDGenerator issues connection IDs of CIDLen bytes whose first byte is
// Generation and whose other bytes are random (crypto/rand). It implements
// quic.ConnectionIDGenerator.
type ConnIDGenerator struct {
	Generation uint8
}

var _ quic.ConnectionIDGenerator = ConnIDGenerator{}

// GenerateConnectionID returns a new connection ID.
func (g ConnIDGenerator) GenerateConnectionID() (quic.ConnectionID, error) {
	var b [CIDLen]byte
	b[0] = g.Generation
	if _, err := rand.Read(b[1:]); err != nil {
		return quic.ConnectionID{}, fmt.Errorf("random connection ID: %w", err)
	}
	return quic.ConnectionIDFromBytes(b[:]), nil
}

// ConnectionIDLen returns CIDLen.
func (ConnIDGenerator) ConnectionIDLen() int { return CIDLen }

// Group is one process's handle on the steering program and maps of one
// reuseport group. Its methods are not safe for concurrent use.
type Group struct {
	prog   *ebpf.Program
	socks  *ebpf.Map
	newest *ebpf.Map
	stats  *ebpf.Map
}

// NumFDs is the number of descriptors of a Group (FDs, FromFDs).
const NumFDs = 4

// New loads a new program and empty maps: the first process of a group.
func New() (*Group, error) {
	var objs quicsteerbpf.QuicsteerObjects
	if err := quicsteerbpf.LoadQuicsteerObjects(&objs, nil); err != nil {
		return nil, fmt.Errorf("load QUIC steering program: %w", err)
	}
	return &Group{prog: objs.QuicsteerSelect, socks: objs.QuicsteerSocks, newest: objs.QuicsteerNewest, stats: objs.QuicsteerStats}, nil
}

// FromFDs takes over the program and map descriptors a predecessor passed,
// in the order FDs returns them. It owns the descriptors from then on, also
// when it fails. The maps are shared with the predecessor; the program is
// this version's own, loaded against those maps (so an upgrade brings its
// program along when attached by Join), or the predecessor's if this one
// does not load against them.
func FromFDs(fds [NumFDs]int) (*Group, error) {
	g := &Group{}
	var errs []error
	var err error
	if g.prog, err = ebpf.NewProgramFromFD(fds[0]); err != nil {
		errs = append(errs, fmt.Errorf("steering program: %w", err))
	} else if g.prog.Type() != ebpf.SkReuseport {
		errs = append(errs, fmt.Errorf("steering program: type %s, want %s", g.prog.Type(), ebpf.SkReuseport))
	}
	if g.socks, err = ebpf.NewMapFromFD(fds[1]); err != nil {
		errs = append(errs, fmt.Errorf("steering socket array: %w", err))
	} else if g.socks.Type() != ebpf.ReusePortSockArray {
		errs = append(errs, fmt.Errorf("steering socket array: type %s, want %s", g.socks.Type(), ebpf.ReusePortSockArray))
	}
	if g.newest, err = ebpf.NewMapFromFD(fds[2]); err != nil {
		errs = append(errs, fmt.Errorf("steering newest slot: %w", err))
	} else if g.newest.Type() != ebpf.Array {
		errs = append(errs, fmt.Errorf("steering newest slot: type %s, want %s", g.newest.Type(), ebpf.Array))
	}
	if g.stats, err = ebpf.NewMapFromFD(fds[3]); err != nil {
		errs = append(errs, fmt.Errorf("steering counters: %w", err))
	} else if g.stats.Type() != ebpf.PerCPUArray {
		errs = append(errs, fmt.Errorf("steering counters: type %s, want %s", g.stats.Type(), ebpf.PerCPUArray))
	}
	if err := errors.Join(errs...); err != nil {
		g.Close()
		return nil, err
	}
	var objs quicsteerbpf.QuicsteerObjects
	opts := &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{
		quicsteerbpf.QuicsteerMapQuicsteerSocks:  g.socks,
		quicsteerbpf.QuicsteerMapQuicsteerNewest: g.newest,
		quicsteerbpf.QuicsteerMapQuicsteerStats:  g.stats,
	}}
	if quicsteerbpf.LoadQuicsteerObjects(&objs, opts) == nil {
		// The replaced maps come back as new handles on the same maps.
		_ = objs.QuicsteerSocks.Close()
		_ = objs.QuicsteerNewest.Close()
		_ = objs.QuicsteerStats.Close()
		_ = g.prog.Close()
		g.prog = objs.QuicsteerSelect
	}
	return g, nil
}

// FDs returns the descriptors of the program, the socket array, the
// newest slot and the counters, to pass to a successor; they stay owned by
// the Group.
func (g *Group) FDs() [NumFDs]int {
	return [NumFDs]int{g.prog.FD(), g.socks.FD(), g.newest.FD(), g.stats.FD()}
}

// Stats counts what the program did with the group's datagrams since the
// group's first process loaded it.
type Stats struct {
	// ByConnectionID went to the generation in their connection ID.
	ByConnectionID uint64
	// Newest went to the newest generation: new connections, datagrams
	// that are not QUIC, and those of a generation without a socket.
	Newest uint64
	// Unselected found no socket at all (not even the newest's) and went
	// where the kernel's hash put them.
	Unselected uint64
}

// Stats returns the program's counters, summed over CPUs.
func (g *Group) Stats() (Stats, error) {
	var st Stats
	for stat, dst := range map[quicsteerbpf.QuicsteerQuicsteerStat]*uint64{
		quicsteerbpf.QuicsteerQuicsteerStatQUICSTEER_STAT_BY_CID:     &st.ByConnectionID,
		quicsteerbpf.QuicsteerQuicsteerStatQUICSTEER_STAT_NEWEST:     &st.Newest,
		quicsteerbpf.QuicsteerQuicsteerStatQUICSTEER_STAT_UNSELECTED: &st.Unselected,
	} {
		var perCPU []uint64
		if err := g.stats.Lookup(stat, &perCPU); err != nil {
			return Stats{}, fmt.Errorf("read steering counters: %w", err)
		}
		for _, n := range perCPU {
			*dst += n
		}
	}
	return st, nil
}

// Join attaches the program to the reuseport group of conn (a bound UDP
// socket with SO_REUSEPORT) and puts conn into the socket array at gen.
// It does not make gen the newest: until Activate, conn receives only
// packets of connections whose IDs carry gen, and there are none yet.
func (g *Group) Join(conn net.PacketConn, gen uint8) error {
	if err := reuseport.AttachProgram(conn, g.prog.FD()); err != nil {
		return fmt.Errorf("join generation %d: %w", gen, err)
	}
	err := reuseport.FD(conn, func(fd int) error {
		return g.socks.Update(uint32(gen), uint64(fd), ebpf.UpdateAny)
	})
	if err != nil {
		return fmt.Errorf("join generation %d: put socket into the array: %w", gen, err)
	}
	return nil
}

// Activate makes gen the newest generation: new connections go to its
// socket from now on.
func (g *Group) Activate(gen uint8) error {
	if err := g.newest.Update(uint32(0), uint32(gen), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("make generation %d the newest: %w", gen, err)
	}
	return nil
}

// Newest returns the newest generation.
func (g *Group) Newest() (uint8, error) {
	var v uint32
	if err := g.newest.Lookup(uint32(0), &v); err != nil {
		return 0, fmt.Errorf("read the newest generation: %w", err)
	}
	return uint8(v), nil
}

// Close closes the process's descriptors. The kernel objects live on while
// the group's sockets (which hold the program) or a successor use them.
func (g *Group) Close() {
	if g.prog != nil {
		_ = g.prog.Close()
	}
	if g.socks != nil {
		_ = g.socks.Close()
	}
	if g.newest != nil {
		_ = g.newest.Close()
	}
	if g.stats != nil {
		_ = g.stats.Close()
	}
}

// Clone returns a Group with its own descriptors for the same program and
// maps, e.g. to send them while the original may be closed.
func (g *Group) Clone() (*Group, error) {
	c := &Group{}
	var err error
	if c.prog, err = g.prog.Clone(); err == nil {
		if c.socks, err = g.socks.Clone(); err == nil {
			if c.newest, err = g.newest.Clone(); err == nil {
				c.stats, err = g.stats.Clone()
			}
		}
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("clone steering descriptors: %w", err)
	}
	return c, nil
}
