// Package digest hashes bytes to 128-bit keys for caches that live in one
// process: the loader's parsed documents and the standalone agent's check
// that its files changed. It uses the runtime's seeded hash (hash/maphash,
// AES-based where the CPU has it), about ten times faster than SHA-256 on
// the configuration files a reload reads, which SHA-256 spent 2-3 ms of a
// 3000-route reload on. The seeds are random per process, so keys are
// never written anywhere or compared across processes; two independent
// 64-bit hashes make a chance collision of two different contents
// negligible (about 2^-128 per pair), and the files hashed are the
// operator's own configuration, not input from the network.
package digest

import "hash/maphash"

var seeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

// Sum is a 128-bit digest.
type Sum [2]uint64

// Hash computes a Sum of everything written to it. The zero value is not
// usable; use New.
type Hash struct{ h [2]maphash.Hash }

// New returns a Hash with this process's seeds.
func New() *Hash {
	d := &Hash{}
	d.h[0].SetSeed(seeds[0])
	d.h[1].SetSeed(seeds[1])
	return d
}

// Write adds p; it never fails.
func (d *Hash) Write(p []byte) (int, error) {
	_, _ = d.h[0].Write(p)
	_, _ = d.h[1].Write(p)
	return len(p), nil
}

// WriteString adds s; it never fails.
func (d *Hash) WriteString(s string) (int, error) {
	_, _ = d.h[0].WriteString(s)
	_, _ = d.h[1].WriteString(s)
	return len(s), nil
}

// Sum returns the digest of what was written so far.
func (d *Hash) Sum() Sum { return Sum{d.h[0].Sum64(), d.h[1].Sum64()} }
