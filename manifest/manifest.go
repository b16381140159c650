package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"

	"github.com/novaedge/novaedge/diag"
)

// Document is one resource read from YAML.
type Document struct {
	// Pos is the file and the line where the document's content starts.
	Pos diag.Position
	// Object is the resource as the kube-apiserver would decode it from JSON:
	// map[string]any, []any, string, int64, float64, bool and nil only.
	Object map[string]any
	// APIVersion, Kind, Name and Namespace are read from Object; each is
	// empty when missing or not a string.
	APIVersion, Kind, Name, Namespace string

	root *yaml.Node // the document's mapping node, lines already absolute; nil once detached
	src  *source    // where the document is in its file, to parse it again once detached
}

// source locates a document in its file, so that a detached document can
// find its lines again by parsing its part of the file a second time.
type source struct {
	chunk chunk // the part of the file between separator lines that holds it
	index int   // how many documents of the chunk the decoder returned before it

	once sync.Once
	root *yaml.Node // the parsed tree, once a detached document needed it
}

// tree parses the document again, the first time it is called, and returns
// its mapping node as newDocument found it.
func (s *source) tree() *yaml.Node {
	s.once.Do(func() {
		dec := yaml.NewDecoder(bytes.NewReader(s.chunk.data))
		for i := 0; i <= s.index; i++ {
			var n yaml.Node
			if err := decode(dec, &n); err != nil {
				return // cannot happen: the same bytes parsed before
			}
			if i == s.index && n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
				shift(&n, s.chunk.line-1)
				s.root = deref(n.Content[0])
			}
		}
	})
	return s.root
}

// Detach returns the document without its object and its parsed YAML tree,
// which hold several kilobytes per resource, keeping what Position and Line
// need: they parse the document's part of the file again (once per document)
// when first asked. The loader keeps every document of a configuration to
// place diagnostics found later; detached, they cost it a few bytes each (and
// a share of the file's bytes) instead.
func (d Document) Detach() Document {
	d.Object, d.root = nil, nil
	return d
}

// Bare returns the document detached (Detach) and without the bytes of
// its file, for a cache that outlives them: positions cannot be found
// until Chunk.Moved gives it the bytes of its chunk again.
func (d Document) Bare() Document {
	d = d.Detach()
	if d.src != nil {
		d.src = &source{chunk: chunk{line: d.src.chunk.line}, index: d.src.index}
	}
	return d
}

// Ref names the document's resource.
func (d Document) Ref() diag.Ref {
	return diag.Ref{Kind: d.Kind, Namespace: d.Namespace, Name: d.Name}
}

// Position returns the file and line for a field path of the document; see
// Line.
func (d Document) Position(fieldPath string) diag.Position {
	return diag.Position{File: d.Pos.File, Line: d.Line(fieldPath)}
}

// Load reads documents from files and directories. A directory contributes
// its *.yaml and *.yml files, not those of subdirectories, in name order.
// Unreadable files and broken documents are reported; everything else that
// can be read is returned.
func Load(paths ...string) ([]Document, diag.List) {
	var docs []Document
	diags := Walk(paths, func(d Document) { docs = append(docs, d) })
	return docs, diags
}

// Walk reads documents as Load does, in the same order, but hands each to fn
// as soon as it is parsed instead of returning them all: a caller that keeps
// only what it derives from a document (and the document detached, see
// Detach) then never holds the parsed form of more than a few documents at
// once, where Load holds every document's tree and object (about 10 kB per
// resource). Problems are returned as Load returns them.
func Walk(paths []string, fn func(Document)) diag.List {
	return WalkChunks(paths, func(c Chunk) diag.List { return c.Parse(fn) })
}

// WalkChunks reads the files Load reads, in the same order, and hands each
// part of them between "---" separator lines to fn, unparsed: a caller
// that remembers what it derived from a chunk's bytes need not parse them
// again when they come back (Chunk.Moved). It returns the problems with
// the files followed by fn's, in the order Load reports them.
func WalkChunks(paths []string, fn func(Chunk) diag.List) diag.List {
	var diags diag.List
	for _, p := range paths {
		files, err := expand(p)
		if err != nil {
			diags = append(diags, fileError(p, err))
			continue
		}
		if len(files) == 0 {
			diags.Warnf(diag.Ref{}, "", "no *.yaml or *.yml files in directory")
			diags[len(diags)-1].Pos.File = p
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				diags = append(diags, fileError(f, err))
				continue
			}
			for _, c := range split(data) {
				diags = append(diags, fn(Chunk{file: f, chunk: c})...)
			}
		}
	}
	return diags
}

// Chunk is a part of a file between "---" separator lines: usually one
// document.
type Chunk struct {
	file string
	chunk
}

// File is the chunk's file, as positions name it.
func (c Chunk) File() string { return c.file }

// Line is the line of the chunk's first byte in its file, from 1.
func (c Chunk) Line() int { return c.line }

// Data is the chunk's bytes; the caller must not change them.
func (c Chunk) Data() []byte { return c.data }

// Own returns c with a copy of its bytes. The documents parsed from a
// chunk keep its bytes (for positions), and a chunk's bytes are part of
// its file's: a cache of documents from many versions of a file, which
// Own lets hold only the chunks it keeps, would otherwise hold every
// version whole.
func (c Chunk) Own() Chunk {
	c.data = bytes.Clone(c.data)
	return c
}

// Parse parses the chunk's documents and hands each to fn, returning their
// problems (see Parse).
func (c Chunk) Parse(fn func(Document)) diag.List {
	return parseChunk(c.file, c.chunk, fn)
}

// Moved returns d, a document parsed from a chunk of the same file with
// the same bytes as c, and detached (Detach), as if it had been parsed
// from c: its positions follow the lines c has moved by.
func (c Chunk) Moved(d Document) Document {
	if d.src == nil {
		return d
	}
	d.Pos.Line += c.line - d.src.chunk.line
	d.src = &source{chunk: c.chunk, index: d.src.index}
	return d
}

func fileError(file string, err error) diag.Diagnostic {
	return diag.Diagnostic{Severity: diag.Error, Message: err.Error(), Pos: diag.Position{File: file}}
}

// Files returns the files Load reads for paths, in the order it reads them.
func Files(paths ...string) ([]string, error) {
	var out []string
	for _, p := range paths {
		fs, err := expand(p)
		if err != nil {
			return nil, err
		}
		out = append(out, fs...)
	}
	return out, nil
}

// expand returns path itself for a file, and the YAML files in it for a
// directory.
func expand(path string) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path) // sorted by name
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		name := e.Name()
		if ext := filepath.Ext(name); ext != ".yaml" && ext != ".yml" {
			continue
		}
		full := filepath.Join(path, name)
		if fi, err := os.Stat(full); err != nil || fi.IsDir() {
			continue // a dangling link or a directory named *.yaml
		}
		files = append(files, full)
	}
	return files, nil
}

// Parse reads the documents of one file's contents; name is used in
// positions. Documents separated by "---" lines are parsed independently, so
// a syntax error loses at most the rest of its own part of the file.
// Empty, comment-only and null documents are skipped.
func Parse(name string, data []byte) ([]Document, diag.List) {
	var docs []Document
	diags := parse(name, data, func(d Document) { docs = append(docs, d) })
	return docs, diags
}

// parse is Parse handing each document to fn.
func parse(name string, data []byte, fn func(Document)) diag.List {
	var diags diag.List
	for _, c := range split(data) {
		diags = append(diags, parseChunk(name, c, fn)...)
	}
	return diags
}

// chunk is a part of a file between "---" separator lines.
type chunk struct {
	data []byte
	line int // line of data's first byte in the file, from 1
}

// split cuts data at separator lines the way kubectl does: a line starting
// with "---" followed by nothing but blanks or a comment.
func split(data []byte) []chunk {
	var chunks []chunk
	start, startLine, line := 0, 1, 1
	for off := 0; off < len(data); line++ {
		end := bytes.IndexByte(data[off:], '\n')
		if end < 0 {
			end = len(data)
		} else {
			end += off + 1
		}
		if isSeparator(data[off:end]) {
			chunks = append(chunks, chunk{data[start:off], startLine})
			start, startLine = end, line+1
		}
		off = end
	}
	return append(chunks, chunk{data[start:], startLine})
}

func isSeparator(line []byte) bool {
	rest, ok := bytes.CutPrefix(line, []byte("---"))
	rest = bytes.TrimSpace(rest)
	return ok && (len(rest) == 0 || rest[0] == '#')
}

// syntaxLine matches the line in yaml.v3 error messages.
var syntaxLine = regexp.MustCompile(`^yaml: line (\d+): `)

// parseChunk parses the YAML documents of one chunk and hands each to fn. A
// syntax error ends the chunk: the parser cannot resynchronise after one.
func parseChunk(name string, c chunk, fn func(Document)) diag.List {
	var diags diag.List
	dec := yaml.NewDecoder(bytes.NewReader(c.data))
	for index := 0; ; index++ {
		var n yaml.Node
		err := decode(dec, &n)
		if errors.Is(err, io.EOF) {
			return diags
		}
		if err != nil {
			msg, line := err.Error(), c.line
			if m := syntaxLine.FindStringSubmatch(msg); m != nil {
				l, _ := strconv.Atoi(m[1])
				msg, line = msg[len(m[0]):], c.line+l-1
			}
			msg = strings.TrimPrefix(msg, "yaml: ")
			diags = append(diags, diag.Diagnostic{Severity: diag.Error, Message: "YAML syntax error: " + msg, Pos: diag.Position{File: name, Line: line}})
			return diags
		}
		shift(&n, c.line-1)
		d, ds, ok := newDocument(name, &n)
		diags = append(diags, ds...)
		if ok {
			d.src = &source{chunk: c, index: index}
			fn(d)
		}
	}
}

// decode runs the YAML decoder and turns a panic inside it into an error, so
// no input can crash the caller.
func decode(dec *yaml.Decoder, n *yaml.Node) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("yaml parser failed: %v", r)
		}
	}()
	return dec.Decode(n)
}

// shift adds off to the line of every node of the tree under n.
func shift(n *yaml.Node, off int) {
	n.Line += off
	for _, c := range n.Content {
		shift(c, off)
	}
}

// newDocument converts a parsed document. ok is false when there is no
// object to return: the document is empty or null, or is not a mapping, or
// holds a value JSON cannot represent.
func newDocument(file string, n *yaml.Node) (doc Document, diags diag.List, ok bool) {
	if n.Kind != yaml.DocumentNode || len(n.Content) == 0 {
		return Document{}, nil, false
	}
	root := deref(n.Content[0])
	pos := diag.Position{File: file, Line: root.Line}
	switch {
	case root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null":
		return Document{}, nil, false
	case root.Kind != yaml.MappingNode:
		diags = append(diags, diag.Diagnostic{Severity: diag.Error, Message: fmt.Sprintf("document must be a mapping (an object), not %s", kindName(root)), Pos: pos})
		return Document{}, diags, false
	}
	c := converter{file: file, active: map[*yaml.Node]bool{}}
	obj, _ := c.value(root).(map[string]any)
	if len(c.diags) > 0 {
		return Document{}, c.diags, false
	}
	doc = Document{Pos: pos, Object: obj, root: root}
	doc.APIVersion = doc.str(&diags, "apiVersion", obj["apiVersion"])
	doc.Kind = doc.str(&diags, "kind", obj["kind"])
	if md, ok := obj["metadata"].(map[string]any); ok {
		doc.Name = doc.str(&diags, "metadata.name", md["name"])
		doc.Namespace = doc.str(nil, "metadata.namespace", md["namespace"])
	} else {
		doc.str(&diags, "metadata.name", nil)
	}
	for i := range diags {
		diags[i].Resource = doc.Ref()
	}
	return doc, diags, true
}

// str returns v when it is a non-empty string. Otherwise it reports field as
// missing or invalid in diags, unless diags is nil, and returns "".
func (d Document) str(diags *diag.List, field string, v any) string {
	s, ok := v.(string)
	if ok && s != "" {
		return s
	}
	if diags != nil {
		msg := "Required value"
		if v != nil && !ok {
			msg = fmt.Sprintf("Invalid value: %v: must be a string", v)
		}
		*diags = append(*diags, diag.Diagnostic{Severity: diag.Error, Field: field, Message: msg, Pos: d.Position(field)})
	}
	return ""
}

// kindName describes a node's kind for messages.
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a sequence"
	case yaml.ScalarNode:
		return fmt.Sprintf("the scalar %q", n.Value)
	default:
		return "a " + n.ShortTag()
	}
}
