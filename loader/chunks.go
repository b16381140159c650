package loader

import (
	"maps"
	"runtime"
	"slices"
	"sync"

	"github.com/novaedge/novaedge/diag"
	"github.com/novaedge/novaedge/internal/digest"
	"github.com/novaedge/novaedge/manifest"
	"github.com/novaedge/novaedge/schema"
)

// chunkCache maps a chunk's file and bytes (chunkKey) to what loading it
// gave. A cache is never changed once built: Load builds the next one from
// the chunks it read, so it holds only what the last load read.
type chunkCache map[digest.Sum]*chunkResult

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

// chunkKey is a digest of the chunk's file name and bytes: a key of the
// bytes themselves held 2 MB more with 5000 routes, and SHA-256 cost 2 ms
// of each reload of 3000 routes (see package digest).
func chunkKey(c manifest.Chunk) digest.Sum {
	h := digest.New()
	_, _ = h.WriteString(c.File())
	_, _ = h.Write(c.Data())
	return h.Sum()
}

// loadChunk parses and checks the documents of c. The result outlives c's
// file (the next loads reuse it), so with own its documents keep a copy of
// c's bytes, not the file's: each edit of a file of 3000 routes left the
// heap holding another 0.9 MB while the loader held its chunks. A load
// that reuses nothing passes !own: its chunks together hold their file
// anyway, and thousands of copies fragmented the heap (1.5 MB more
// resident at rest with 5000 routes).
func loadChunk(v *schema.Validator, c manifest.Chunk, own bool) *chunkResult {
	if own {
		c = c.Own()
	}
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

// restCache maps a chunk's key to what it left when the chunks were
// dropped (releaseValidator): the documents of a clean chunk, as the JSON
// their objects were decoded from, about 0.6 kB each against 1.8 kB
// decoded. Reviving them decodes them again, without parsing YAML or
// validating. A cache is never changed once built.
type restCache map[digest.Sum][]restDoc

type restDoc struct {
	// doc is bare (manifest.Document.Bare), with its line then; its
	// apiVersion and kind are its kindSpec's strings, not copies.
	doc     manifest.Document
	ref     diag.Ref
	decoded []byte    // checked.raw
	spec    *kindSpec // checked.spec
}

// restOf puts a cache's clean chunks to rest; the others are parsed again
// when they come back.
func restOf(c chunkCache) restCache {
	out := make(restCache, len(c))
chunks:
	for key, cr := range c {
		if !cr.clean {
			continue
		}
		docs := make([]restDoc, 0, len(cr.docs))
		for _, d := range cr.docs {
			if !d.tracked || d.add == nil || d.raw == nil {
				continue chunks
			}
			doc, ref := d.doc.Bare(), d.ref
			if doc.APIVersion == d.spec.apiVersion {
				doc.APIVersion = d.spec.apiVersion
			}
			if doc.Kind == d.spec.kind {
				doc.Kind = d.spec.kind
			}
			if ref.Kind == d.spec.kind {
				ref.Kind = d.spec.kind
			}
			docs = append(docs, restDoc{doc: doc, ref: ref, decoded: d.raw, spec: d.spec})
		}
		out[key] = docs
	}
	return out
}

// reviveAll decodes the documents of every chunk at rest again, on up to
// as many goroutines as there are CPUs: after a quiet spell, a load of
// 3000 routes decodes 3000 objects, most of its time. A chunk whose
// documents no longer decode (they did before: a bug) is left out, so
// that it is loaded from its bytes.
func reviveAll(rest restCache) map[digest.Sum][]chunkDoc {
	if len(rest) == 0 {
		return nil
	}
	keys := slices.Collect(maps.Keys(rest))
	decoded := make([][]chunkDoc, len(keys))
	workers := min(runtime.GOMAXPROCS(0), 8, (len(keys)+255)/256)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(keys); i += workers {
				decoded[i] = decodeRest(rest[keys[i]])
			}
		})
	}
	wg.Wait()
	out := make(map[digest.Sum][]chunkDoc, len(keys))
	for i, k := range keys {
		if decoded[i] != nil {
			out[k] = decoded[i]
		}
	}
	return out
}

// decodeRest decodes the documents of a chunk at rest; nil if one no
// longer decodes. Their documents are bare until revive moves them into
// their chunk.
func decodeRest(docs []restDoc) []chunkDoc {
	out := make([]chunkDoc, 0, len(docs))
	for _, d := range docs {
		dec := d.spec.codec.decode(d.decoded)
		if dec.err != nil || len(dec.strict) > 0 || len(dec.errs) > 0 || dec.add == nil {
			return nil
		}
		// check's identity of the document, from what it kept.
		id := identity{group(d.doc.APIVersion), d.doc.Kind, d.ref.Namespace, d.ref.Name}
		out = append(out, chunkDoc{
			doc:     d.doc,
			checked: checked{tracked: true, ref: d.ref, id: id, add: dec.add, raw: d.decoded, spec: d.spec},
		})
	}
	return out
}

// revive makes the decoded documents of a chunk at rest (decodeRest) the
// result of c, the chunk of the same file and bytes in this load (a file
// may hold the same chunk twice: each gets its own documents).
func revive(docs []chunkDoc, c manifest.Chunk) *chunkResult {
	cr := &chunkResult{line: c.Line(), clean: true, docs: slices.Clone(docs)}
	for i := range cr.docs {
		cr.docs[i].doc = c.Moved(cr.docs[i].doc)
	}
	return cr
}
