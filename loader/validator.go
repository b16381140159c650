package loader

import (
	"runtime/debug"
	"sync"
	"time"

	"github.com/novaedge/novaedge/deploy/crds"
	"github.com/novaedge/novaedge/schema"
)

// validatorHold is how long the Validator is kept whole after its last use.
//
// A Validator is worth keeping while files change: it remembers the objects
// it found valid, so a standalone agent that re-reads 3000 routes after an
// edit loads them in 0.19 s instead of 0.56 s. Kept for good it costs the
// agent 8 MB of resident memory with 5000 routes (perf/routescale): its
// compiled CEL rules and that memory of valid objects are 3 MB of live heap,
// made amid a load's garbage, and they pin heap pages all over. So after a
// quiet spell it is replaced by a fresh one (schema.Validator.Fresh: the
// same schemas, nothing compiled or remembered, 0.7 MB), and the memory it
// held goes back to the system; reading the CRDs again took 20 ms of the
// first edit after the spell.
// What the last Load made of each chunk (chunkCache) goes with it: that
// made a reload of 3000 routes 0.2 s cheaper again, and holds 9 MB of heap
// with 5000 routes. What stays is the JSON each valid object was decoded
// from (restCache): a tenth of that, and it spares the first edit after a
// quiet spell parsing and validating every document again (3000 routes:
// 1.3 s).
var validatorHold = 30 * time.Second

// Hold is how long Load keeps what it made of the documents after its
// last use: after that, the objects of a next Load are new ones.
func Hold() time.Duration { return validatorHold }

var held struct {
	mu  sync.Mutex
	v   *schema.Validator
	use uint64 // counts uses; a release acts only if none came after it
	// chunks is what the last Load read (Load), held and dropped with v.
	chunks chunkCache
	// rest is what chunks become when they are dropped: kept until the
	// next Load, which revives what it finds again (restCache).
	rest restCache
	// rested is true while v is the fresh Validator a release left.
	rested bool
}

// validator returns the held Validator, compiling the embedded CRDs when
// none is held (about 45 ms), and holds it for validatorHold more, with
// the chunks the last Load read, or what they left at rest.
func validator() (*schema.Validator, chunkCache, restCache, error) {
	held.mu.Lock()
	defer held.mu.Unlock()
	if held.v == nil {
		// The CRDs are the binary's own: checked by a test, not here.
		v, err := schema.NewFromFS(crds.FS, nil)
		if err != nil {
			return nil, nil, nil, err
		}
		held.v = v
	}
	held.use++
	held.rested = false
	use := held.use
	time.AfterFunc(validatorHold, func() { releaseValidator(use) })
	return held.v, held.chunks, held.rest, nil
}

// keepChunks holds what a Load read, for the next, while the Validator is
// held whole. What was at rest is revived into c or no longer in the files.
func keepChunks(c chunkCache) {
	held.mu.Lock()
	if held.v != nil && !held.rested {
		held.chunks, held.rest = c, nil
	}
	held.mu.Unlock()
}

// releaseValidator replaces the Validator by a fresh one (Fresh) unless it
// was used after use, puts the chunks to rest, and returns the memory freed
// to the system at once: an agent at rest would otherwise keep it until its
// next collection, minutes later.
func releaseValidator(use uint64) {
	held.mu.Lock()
	if held.use != use || held.v == nil || held.rested {
		held.mu.Unlock()
		return
	}
	held.rest = restOf(held.chunks)
	held.v, held.chunks, held.rested = held.v.Fresh(), nil, true
	held.mu.Unlock()
	debug.FreeOSMemory()
}
