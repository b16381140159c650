// Package maglev builds the Maglev lookup table that the XDP fast path uses
// to pick a backend: the BPF program hashes a flow, takes the hash modulo
// the table size M and reads the backend ID stored in that slot
// (Table.Lookup does the same in Go).
//
// # Permutations
//
// As in the Maglev paper (Eisenbud et al., NSDI 2016), every backend has a
// preference order over the M slots, the permutation
//
//	slot(j) = (offset + j × skip) mod M,  j = 0, 1, …, M−1
//	offset  = h1(key) mod M
//	skip    = h2(key) mod (M−1) + 1
//
// where h1 and h2 are xxHash64 of the backend's stable key ("address:port")
// under two different seeds. The key, never a list position, drives the
// permutation, so a backend keeps its preferences however the list is
// ordered. M must be prime so that every skip in [1, M−1] is coprime with M
// and each permutation visits every slot exactly once. Permutations are
// walked incrementally, in 64-bit fixed point: the position j is kept as
// (off + j·skip)/M scaled by 2^64, so that the wrap around M is a free
// integer overflow and a step is one addition; no per-backend M-sized
// array is ever built. While between a quarter and 13/16 of the slots are
// taken, a walk probes four positions at a time and takes the first free
// one; once few slots are free, a claim scans them for the one earliest
// in the claimant's permutation instead of walking to it. All find the
// same slot, so the choice changes only the speed.
//
// # Quotas (weights)
//
// A backend's ideal share is M × w / W, where W is the sum of all weights.
// Its quota is the floor or the ceiling of that share, so the slots it ends
// up owning are always within one slot of its weight's share: each backend
// first gets the floor, and the K = M − Σ floor slots left over go, one
// each, to backends with a non-zero fractional part. Without lineage the K
// extra slots go by largest remainder, ties to the smaller key; with lineage
// (BuildFrom) backends that already hold more than their floor come first,
// so the rounding does not shuffle slots between otherwise unchanged
// backends. A backend of weight 0 gets no slots (it drains); a backend whose
// share is below one slot may get none. With equal weights the busiest
// backend owns ⌈M/N⌉ slots, the least busy ⌊M/N⌋, so max/avg ≤ ⌈M/N⌉/(M/N),
// which is the best any table of that size can do: 1.0071 at N = 1000,
// M = 65537, and below 1 + N/M for every N.
//
// # Fill
//
// Free slots are filled by population rounds, the weighted variant of the
// paper's round-robin: with F free slots, A backends still short of their
// quota and d_i the slots backend i still needs, there are R = ⌈F/A⌉ rounds,
// and in round r backend i (in key order) claims ⌊(r+1)·d_i/R⌋ − ⌊r·d_i/R⌋
// slots, each the next free slot along its permutation. Over the R rounds
// backend i claims exactly d_i slots; with equal weights every backend
// claims one slot per round, which is the paper's algorithm. Every claim
// finds a free slot because the claims add up to F.
//
// # Lineage (minimal disruption)
//
// A rebuild from scratch remaps about 1% of the slots (0.7% in the paper)
// when one of 1000 backends leaves, ten times the 0.1% that left with it.
// BuildFrom takes the
// previous table (with a controller, the leader's, which the snapshot ships
// to every node: package lineage) and:
//
//  1. counts the slots each current backend (matched by ID) owns in it;
//  2. computes the quotas as above, preferring those counts when rounding;
//  3. keeps every slot whose owner is still a member and within its new
//     quota; a backend over its quota keeps the slots earliest in its own
//     permutation and frees the rest (the position of slot s in the
//     permutation is (s − offset) × skip⁻¹ mod M);
//  4. fills the freed slots (those of departed backends, zero-weight
//     backends and over-quota backends) with the population rounds above,
//     each short backend taking the free slots earliest in its permutation.
//
// Every step uses only the previous table, the backend set sorted by key
// and integer arithmetic, so every node computes the same bytes. The number
// of slots that change owner is exactly Σ max(0, previous count − new
// quota) over all previous owners, the least any table with these quotas
// allows: removing one of N equally weighted backends moves only that
// backend's slots, and adding one moves only the slots of its new quota.
//
// The ID ties lineage together: a slot of the previous table belongs to the
// current backend with the same ID. Callers must therefore keep a backend's
// ID stable while it stays a member; an ID reused for another key inherits
// the old slots (still balanced and deterministic, only not minimal). A
// previous table of another size than the builder's is ignored, which makes
// BuildFrom the same as Build.
//
// # Determinism
//
// The input is copied and sorted by key (keys must be unique), duplicate
// IDs are rejected, no map is iterated and no floating point is used, so
// the same backend set (in any order) and previous table give a
// byte-identical Table on every node, CPU and Go version. A golden test
// pins the output.
package maglev
