package manifest

import (
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Line returns the source line of a field path in the k8s field.Path format:
// "spec.rules[0].backendRefs[1].name", "metadata.labels[app.kubernetes.io/name]".
// It walks the path as far as the document has it and returns the line of
// the deepest node found, so a missing field points at its parent. A key in
// a mapping gives the line of the key. Keys that contain dots may also be
// written with dots ("spec.selector.matchLabels.app.kubernetes.io/name"), as
// the apiserver does in unknown-field paths. The empty path (and "<nil>")
// gives the document's first line.
func (d Document) Line(fieldPath string) int {
	root := d.root
	if root == nil && d.src != nil {
		root = d.src.tree()
	}
	if root == nil {
		return d.Pos.Line
	}
	n, line := root, root.Line
	segs := splitPath(fieldPath)
	for i := 0; i < len(segs); i++ {
		switch n = deref(n); n.Kind {
		case yaml.MappingNode:
			e, used := lookup(n, segs[i:])
			if e == nil {
				return line
			}
			n, line, i = e.val, e.keyNode.Line, i+used-1
		case yaml.SequenceNode:
			idx, err := strconv.Atoi(segs[i].text)
			if err != nil || idx < 0 || idx >= len(n.Content) {
				return line
			}
			n = n.Content[idx]
			line = n.Line
		default:
			return line
		}
	}
	return line
}

// segment is one step of a field path.
type segment struct {
	text   string
	dotted bool // written as .name, not as [name]
}

// splitPath cuts a field path into its field names, indices and keys.
func splitPath(p string) []segment {
	if p == "<nil>" {
		return nil
	}
	var segs []segment
	for p != "" {
		switch p[0] {
		case '.':
			p = p[1:]
		case '[':
			// A key ends at the "]" that ends the path or is followed by
			// another step; keys may themselves hold "]".
			end := -1
			for i := 1; i < len(p); i++ {
				if p[i] == ']' && (i+1 == len(p) || p[i+1] == '.' || p[i+1] == '[') {
					end = i
					break
				}
			}
			if end < 0 {
				return append(segs, segment{text: p[1:]})
			}
			segs = append(segs, segment{text: p[1:end]})
			p = p[end+1:]
		default:
			end := strings.IndexAny(p, ".[")
			if end < 0 {
				end = len(p)
			}
			segs = append(segs, segment{text: p[:end], dotted: true})
			p = p[end:]
		}
	}
	return segs
}

// lookup finds the entry of mapping n named by segs[0], or, for keys with
// dots written with dots, by segs[0] joined with the dotted segments after
// it. It returns the entry and how many segments its key used.
func lookup(n *yaml.Node, segs []segment) (*entry, int) {
	c := &converter{active: map[*yaml.Node]bool{}}
	entries := c.entries(n)
	key := ""
	for j, s := range segs {
		if j > 0 {
			if !s.dotted {
				break
			}
			key += "."
		}
		key += s.text
		for i := range entries {
			if entries[i].key == key {
				return &entries[i], j + 1
			}
		}
		if !segs[0].dotted {
			break
		}
	}
	return nil, 0
}
