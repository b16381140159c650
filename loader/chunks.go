package loader

import (
	"crypto/sha256"

	"github.com/novaedge/novaedge/diag"
	"github.com/novaedge/novaedge/manifest"
	"github.com/novaedge/novaedge/schema"
)

// chunkCache maps a chunk's file and bytes (chunkKey) to what loading it
// gave. A cache is never changed once built: Load builds the next one from
// the chunks it read, so it holds only what the last load read.
type chunkCache map[[sha256.Size]byte]*chunkResult

// chunkResult is what one chunk gave, with positions as they were when it
// was loaded (line). It is shared by loads and never changed.
type chunkResult struct {
	line  int       // the chunk's first line then
	diags diag.List // manifest's problems with the chunk (syntax, structure)
	docs  []chunkDoc
	// clean is true when the chunk gave no diagnostic at all. Only a clean
	// result serves the same bytes at another line: messages may quote
	// lines ("mapping key already defined at line 7"), which cannot be
	// moved, and a chunk with problems is rare enough to check again.
	clean bool
}

// chunkDoc is one document of a chunk: detached, and what check found.
type chunkDoc struct {
	doc manifest.Document
	checked
}

// chunkKey is the SHA-256 of the chunk's file name and bytes: a key of
// the bytes themselves held 2 MB more with 5000 routes.
func chunkKey(c manifest.Chunk) [sha256.Size]byte {
	h := sha256.New()
	_, _ = h.Write([]byte(c.File()))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write(c.Data())
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k
}

// loadChunk parses and checks the documents of c.
func loadChunk(v *schema.Validator, c manifest.Chunk) *chunkResult {
	cr := &chunkResult{line: c.Line()}
	cr.diags = c.Parse(func(doc manifest.Document) {
		cr.docs = append(cr.docs, chunkDoc{doc: doc.Detach(), checked: check(v, doc)})
	})
	cr.clean = len(cr.diags) == 0
	for _, d := range cr.docs {
		if len(d.diags) > 0 || len(d.dupWarnings) > 0 {
			cr.clean = false
		}
	}
	return cr
}
