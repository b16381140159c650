package manifest

import (
	"fmt"
	"math"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/novaedge/novaedge/diag"
)

// maxNodes bounds the nodes a document may expand to through aliases, so a
// "billion laughs" document fails instead of exhausting memory.
const maxNodes = 1_000_000

// converter turns a yaml.v3 node tree into JSON-compatible values.
type converter struct {
	file   string
	diags  diag.List
	nodes  int
	active map[*yaml.Node]bool // anchors being expanded, to catch cycles
}

func (c *converter) errorf(n *yaml.Node, format string, args ...any) {
	c.diags = append(c.diags, diag.Diagnostic{
		Severity: diag.Error,
		Message:  fmt.Sprintf(format, args...),
		Pos:      diag.Position{File: c.file, Line: n.Line},
	})
}

// spend counts k more nodes visited at n, and reports false (once with a
// diagnostic) when the document has gone over maxNodes.
func (c *converter) spend(n *yaml.Node, k int) bool {
	over := c.nodes > maxNodes
	c.nodes += k
	if c.nodes > maxNodes && !over {
		c.errorf(n, "document expands to more than %d values through aliases", maxNodes)
	}
	return c.nodes <= maxNodes
}

// value converts n; on a problem it records a diagnostic and returns nil.
func (c *converter) value(n *yaml.Node) any {
	if !c.spend(n, 1) {
		return nil
	}
	switch n.Kind {
	case yaml.AliasNode:
		switch {
		case n.Alias == nil:
			c.errorf(n, "unknown anchor %q", n.Value)
			return nil
		case c.active[n.Alias]:
			c.errorf(n, "alias *%s refers to a value that contains it", n.Value)
			return nil
		}
		c.active[n.Alias] = true
		defer delete(c.active, n.Alias)
		return c.value(n.Alias)
	case yaml.ScalarNode:
		return c.scalar(n)
	case yaml.SequenceNode:
		list := make([]any, len(n.Content))
		for i, item := range n.Content {
			list[i] = c.value(item)
		}
		return list
	case yaml.MappingNode:
		m := map[string]any{}
		for _, e := range c.entries(n) {
			m[e.key] = c.value(e.val)
		}
		return m
	default:
		c.errorf(n, "unexpected YAML node")
		return nil
	}
}

// entry is a key and value of a mapping.
type entry struct {
	key     string
	keyNode *yaml.Node
	val     *yaml.Node
}

// entries lists the entries of mapping n with merge keys ("<<: *base")
// expanded; keys written in n win over merged ones. Duplicate and non-string
// keys are reported and left out.
func (c *converter) entries(n *yaml.Node) []entry {
	if !c.spend(n, 1+len(n.Content)/2) {
		return nil
	}
	var out []entry
	var merges []*yaml.Node
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		key, ok := c.key(k)
		if !ok {
			continue
		}
		if prev := seen[key]; prev != nil {
			c.errorf(k, "mapping key %q already defined at line %d", key, prev.Line)
			continue
		}
		seen[key] = k
		out = append(out, entry{key: key, keyNode: k, val: v})
	}
	for _, m := range merges {
		sources := []*yaml.Node{m}
		if deref(m).Kind == yaml.SequenceNode {
			sources = deref(m).Content
		}
		for _, src := range sources {
			for _, e := range c.merged(src) {
				if seen[e.key] == nil {
					seen[e.key] = e.keyNode
					out = append(out, e)
				}
			}
		}
	}
	return out
}

// merged returns the entries a merge key takes from src.
func (c *converter) merged(src *yaml.Node) []entry {
	m := deref(src)
	switch {
	case m.Kind != yaml.MappingNode:
		c.errorf(src, "a merge key (<<) takes a mapping or a sequence of mappings")
		return nil
	case c.active[m]:
		c.errorf(src, "merge of *%s refers to a value that contains it", src.Value)
		return nil
	}
	c.active[m] = true
	defer delete(c.active, m)
	return c.entries(m)
}

// key returns the string a mapping key node holds. JSON keys are strings, so
// any other key is reported.
func (c *converter) key(k *yaml.Node) (string, bool) {
	d := deref(k)
	if d.Kind != yaml.ScalarNode || d.ShortTag() != "!!str" {
		what := d.ShortTag()
		if d.Kind == yaml.ScalarNode {
			what = fmt.Sprintf("%s %q", what, d.Value)
		}
		c.errorf(k, "mapping key must be a string, not %s (quote it)", what)
		return "", false
	}
	return validUTF8(d.Value), true
}

// scalar converts a scalar node to what encoding/json would produce and the
// apiserver decode: int64 when the number is whole and fits, else float64.
func (c *converter) scalar(n *yaml.Node) any {
	switch n.ShortTag() {
	case "!!str", "!!timestamp": // timestamps reach the apiserver as strings
		return validUTF8(n.Value)
	case "!!null":
		return nil
	}
	var v any
	if err := n.Decode(&v); err != nil {
		c.errorf(n, "%s", strings.TrimPrefix(err.Error(), "yaml: "))
		return nil
	}
	switch v := v.(type) {
	case int:
		return int64(v)
	case int64:
		return v
	case uint64:
		if v <= math.MaxInt64 {
			return int64(v)
		}
		return float64(v)
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			c.errorf(n, "%s cannot be represented in JSON", n.Value)
			return nil
		}
		// encoding/json writes whole floats below 1e21 without a fraction,
		// and the apiserver reads those back as int64.
		if v == math.Trunc(v) && math.Abs(v) < 1e21 && v >= math.MinInt64 && v < math.MaxInt64 {
			return int64(v)
		}
		return v
	case bool:
		return v
	case string:
		return validUTF8(v)
	default: // custom tags and the like: keep the text
		return validUTF8(n.Value)
	}
}

// validUTF8 replaces each invalid byte with U+FFFD, as encoding/json does.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		b.WriteRune(r) // utf8.RuneError for an invalid byte
		i += size
	}
	return b.String()
}

// deref follows an alias to the node it names.
func deref(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return n.Alias
	}
	return n
}
