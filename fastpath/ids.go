package fastpath

import (
	"errors"
	"time"
)

// ErrIDsExhausted reports that every ID is in use or still quarantined.
var ErrIDsExhausted = errors.New("no free ID")

// idPool hands out the IDs 1..max-1 (0 means "none" to the program). A
// released ID is quarantined: conntrack entries may still name it, and an
// ID reused too early would send those flows to an unrelated backend.
type idPool struct {
	max        uint32
	next       uint32 // lowest never-used ID
	quarantine []quarantined
	inUse      map[uint32]bool
	hold       time.Duration
}

type quarantined struct {
	id    uint32
	until time.Time
}

func newIDPool(max uint32, hold time.Duration) *idPool {
	return &idPool{max: max, next: 1, inUse: make(map[uint32]bool), hold: hold}
}

// reserve marks id as used: it was found in pinned maps at adoption.
func (p *idPool) reserve(id uint32) {
	p.inUse[id] = true
	if id >= p.next {
		p.next = id + 1
	}
}

// quarantineGaps quarantines the IDs below the highest reserved one that
// are not in use: after an agent restart nobody knows when they were
// released, so they are held for a full period before reuse.
func (p *idPool) quarantineGaps(now time.Time) {
	for id := uint32(1); id < p.next; id++ {
		if !p.inUse[id] {
			p.quarantine = append(p.quarantine, quarantined{id, now.Add(p.hold)})
		}
	}
}

// get returns a free ID: never-used ones first, then the longest
// quarantined whose hold has passed.
func (p *idPool) get(now time.Time) (uint32, error) {
	for p.next < p.max {
		id := p.next
		p.next++
		if !p.inUse[id] {
			p.inUse[id] = true
			return id, nil
		}
	}
	if len(p.quarantine) > 0 && !now.Before(p.quarantine[0].until) {
		id := p.quarantine[0].id
		p.quarantine = p.quarantine[1:]
		p.inUse[id] = true
		return id, nil
	}
	return 0, ErrIDsExhausted
}

// put releases id into quarantine until now+hold.
func (p *idPool) put(id uint32, now time.Time) {
	delete(p.inUse, id)
	p.quarantine = append(p.quarantine, quarantined{id, now.Add(p.hold)})
}

// snapshot and restore let Apply undo allocations when it fails before
// writing anything.
type idPoolState struct {
	next       uint32
	quarantine []quarantined
	inUse      map[uint32]bool
}

func (p *idPool) save() idPoolState {
	in := make(map[uint32]bool, len(p.inUse))
	for k, v := range p.inUse {
		in[k] = v
	}
	return idPoolState{p.next, append([]quarantined(nil), p.quarantine...), in}
}

func (p *idPool) restore(s idPoolState) {
	p.next, p.quarantine, p.inUse = s.next, s.quarantine, s.inUse
}
