// Package ipam parses ProxyIPPool address sets and allocates addresses from
// them deterministically. It holds no state: callers pass what is in use, so
// the controller (which persists allocations) and the standalone agent (which
// recomputes them) share one implementation.
package ipam

import (
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"
)

// Range is an inclusive range of addresses of one family.
type Range struct {
	First, Last netip.Addr
	// Text is the form the range was parsed from, for messages.
	Text string
}

// String returns the text the range was parsed from, else "first-last" or
// the single address.
func (r Range) String() string {
	if r.Text != "" {
		return r.Text
	}
	if r.First == r.Last {
		return r.First.String()
	}
	return r.First.String() + "-" + r.Last.String()
}

// Contains reports whether a lies in r.
func (r Range) Contains(a netip.Addr) bool {
	return a.BitLen() == r.First.BitLen() && r.First.Compare(a) <= 0 && a.Compare(r.Last) <= 0
}

// Overlaps reports whether r and o share an address.
func (r Range) Overlaps(o Range) bool {
	return r.First.BitLen() == o.First.BitLen() && r.First.Compare(o.Last) <= 0 && o.First.Compare(r.Last) <= 0
}

// Size is the number of addresses in r.
func (r Range) Size() *big.Int {
	n := new(big.Int).Sub(new(big.Int).SetBytes(r.Last.AsSlice()), new(big.Int).SetBytes(r.First.AsSlice()))
	return n.Add(n, big.NewInt(1))
}

// ParseCIDR parses a prefix into the range it covers. Host bits must be zero.
func ParseCIDR(s string) (Range, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return Range{}, fmt.Errorf("invalid CIDR %q: %w", s, err)
	}
	if p.Masked() != p {
		return Range{}, fmt.Errorf("invalid CIDR %q: host bits set (did you mean %s?)", s, p.Masked())
	}
	p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits())
	return Range{First: p.Addr(), Last: lastAddr(p), Text: s}, nil
}

// ParseAddress parses a single address ("10.0.0.1", "10.0.0.1/32",
// "2001:db8::1/128") or an inclusive range ("10.0.0.1-10.0.0.9").
func ParseAddress(s string) (Range, error) {
	if first, last, ok := strings.Cut(s, "-"); ok {
		a, err1 := netip.ParseAddr(strings.TrimSpace(first))
		b, err2 := netip.ParseAddr(strings.TrimSpace(last))
		if err := errors.Join(err1, err2); err != nil {
			return Range{}, fmt.Errorf("invalid range %q: %w", s, err)
		}
		a, b = a.Unmap(), b.Unmap()
		if a.BitLen() != b.BitLen() {
			return Range{}, fmt.Errorf("invalid range %q: mixes IPv4 and IPv6", s)
		}
		if b.Less(a) {
			return Range{}, fmt.Errorf("invalid range %q: end before start", s)
		}
		return Range{First: a, Last: b, Text: s}, nil
	}
	a, err := ParseHost(s)
	if err != nil {
		return Range{}, err
	}
	return Range{First: a, Last: a, Text: s}, nil
}

// ParseHost parses an address with an optional full-length prefix
// ("10.0.0.1", "10.0.0.1/32", "2001:db8::1/128").
func ParseHost(s string) (netip.Addr, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("invalid address %q: %w", s, err)
		}
		if !p.IsSingleIP() {
			return netip.Addr{}, fmt.Errorf("invalid address %q: prefix must be /32 (IPv4) or /128 (IPv6)", s)
		}
		return p.Addr().Unmap(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("invalid address %q: %w", s, err)
	}
	return a.Unmap(), nil
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// Pool is a parsed address pool.
type Pool struct {
	Name       string
	Ranges     []Range // in spec order: cidrs first, then addresses
	AutoAssign bool
	// AvoidBuggyIPs skips IPv4 addresses ending in .0 or .255.
	AvoidBuggyIPs bool
}

// Contains reports whether a lies in the pool.
func (p *Pool) Contains(a netip.Addr) bool {
	return slices.ContainsFunc(p.Ranges, func(r Range) bool { return r.Contains(a) })
}

// Size is the number of addresses in the pool (ranges may not overlap).
func (p *Pool) Size() *big.Int {
	n := new(big.Int)
	for _, r := range p.Ranges {
		n.Add(n, r.Size())
	}
	return n
}

// Overlap returns the first pair of ranges of p and o that overlap.
func (p *Pool) Overlap(o *Pool) (Range, Range, bool) {
	for _, a := range p.Ranges {
		for _, b := range o.Ranges {
			if a.Overlaps(b) {
				return a, b, true
			}
		}
	}
	return Range{}, Range{}, false
}

// usable reports whether the pool may hand out a.
func (p *Pool) usable(a netip.Addr) bool {
	if p.AvoidBuggyIPs && a.Is4() {
		last := a.As4()[3]
		return last != 0 && last != 255
	}
	return true
}

// Allocate returns the lowest address of the given family (4 or 6) in the
// pool that is not in use, walking ranges in order. It scans at most limit
// addresses so an almost full IPv6 pool cannot stall a build.
func (p *Pool) Allocate(family int, inUse func(netip.Addr) bool) (netip.Addr, bool) {
	const limit = 1 << 20
	scanned := 0
	for _, r := range p.Ranges {
		if (family == 4) != r.First.Is4() {
			continue
		}
		for a := r.First; ; a = a.Next() {
			if scanned++; scanned > limit {
				return netip.Addr{}, false
			}
			if p.usable(a) && !inUse(a) {
				return a, true
			}
			if a == r.Last {
				break
			}
		}
	}
	return netip.Addr{}, false
}
