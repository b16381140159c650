package httphead

import (
	"bytes"
	"fmt"
	"strconv"
)

// Name returns the field's name as it stands in block (canonical once
// ScanFields has seen it); nil for a continuation line.
func (f Field) Name(block []byte) []byte {
	if f.K0 < 0 {
		return nil
	}
	return block[f.K0:f.K1]
}

// Value returns the field's value, without surrounding white space.
func (f Field) Value(block []byte) []byte { return block[f.V0:f.V1] }

// Is reports whether the field is named name, given in canonical form.
func (f Field) Is(block []byte, name string) bool {
	return f.K0 >= 0 && string(block[f.K0:f.K1]) == name
}

// ContentLength returns the Content-Length of a head's fields: -1 if
// there is none; several must all be the same number. Errors wrap
// malformed.
func ContentLength(block []byte, fields []Field, malformed error) (int64, error) {
	n := int64(-1)
	for _, f := range fields {
		if !f.Is(block, "Content-Length") {
			continue
		}
		v := f.Value(block)
		m, ok := parseDecimal(v)
		if !ok {
			return 0, fmt.Errorf("Content-Length %q: %w", Clip(v), malformed)
		}
		if n >= 0 && m != n {
			return 0, fmt.Errorf("conflicting Content-Length values %d and %d: %w", n, m, malformed)
		}
		n = m
	}
	return n, nil
}

// parseDecimal parses a non-negative decimal number that fits an int64.
func parseDecimal(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		// 18 digits always fit; longer ones go the slow way.
		if len(b) == 0 || b[0] < '0' || b[0] > '9' {
			return 0, false
		}
		n, err := strconv.ParseInt(string(b), 10, 64)
		return n, err == nil
	}
	var n int64
	for _, d := range b {
		if d < '0' || d > '9' {
			return 0, false
		}
		n = n*10 + int64(d-'0')
	}
	return n, true
}

// HasToken reports whether the comma-separated list v holds token, in
// any case (httpguts.HeaderValuesContainsToken for one value).
func HasToken(v []byte, token string) bool {
	for len(v) > 0 {
		var item []byte
		item, v, _ = bytes.Cut(v, comma)
		item = bytes.Trim(item, " \t")
		if len(item) == len(token) && bytes.EqualFold(item, []byte(token)) {
			return true
		}
	}
	return false
}

var comma = []byte(",")

// FieldsHaveToken reports whether a field named name (canonical) lists
// token.
func FieldsHaveToken(block []byte, fields []Field, name, token string) bool {
	for _, f := range fields {
		if f.Is(block, name) && HasToken(f.Value(block), token) {
			return true
		}
	}
	return false
}

// NamedByConnection reports whether a Connection field lists key (a
// field name), which then is hop-by-hop (RFC 9110 §7.6.1).
func NamedByConnection(block []byte, fields []Field, key []byte) bool {
	return FieldsHaveToken(block, fields, "Connection", string(key))
}
