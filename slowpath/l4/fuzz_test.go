package l4

import (
	"bytes"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the fuzz seed corpus in testdata/fuzz/FuzzParseClientHello")

const corpusDir = "testdata/fuzz/FuzzParseClientHello"

// seedHellos returns the seed corpus by name: "valid-" seeds parse, "bad-"
// seeds do not. Captured ClientHellos carry fresh random bytes, so the files
// differ on each -update; their parse results do not.
func seedHellos(t testing.TB) map[string][]byte {
	ca, _ := testPKI(t)
	tls13 := captureClientHello(t, &tls.Config{ServerName: "a.example", NextProtos: []string{"h2", "http/1.1"}, RootCAs: ca.Pool()})
	noExt := defaultBody()
	noExt.extensions = nil
	badSNI := defaultBody()
	badSNI.extensions = exts(sniExt(sniEntry(0, "bad name.example")))
	return map[string][]byte{
		"valid-tls13-sni-alpn": tls13,
		"valid-tls12":          captureClientHello(t, &tls.Config{ServerName: "b.example", MaxVersion: tls.VersionTLS12, RootCAs: ca.Pool()}),
		"valid-no-sni":         captureClientHello(t, &tls.Config{ServerName: "127.0.0.1", RootCAs: ca.Pool()}),
		"valid-fragmented":     reframe(t, tls13, 300),
		"valid-built":          helloRecords(defaultBody().bytes()),
		"valid-no-extensions":  helloRecords(noExt.bytes()),
		"bad-http":             []byte("GET / HTTP/1.1\r\nHost: a.example\r\n\r\n"),
		"bad-truncated":        tls13[:100],
		"bad-sni":              helloRecords(badSNI.bytes()),
	}
}

// TestFuzzCorpus checks the committed seed corpus (rewriting it first with
// -update): every seed is there, decodes, and parses as its name says.
func TestFuzzCorpus(t *testing.T) {
	seeds := seedHellos(t)
	if *update {
		if err := os.MkdirAll(corpusDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range seeds {
			file := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n", strconv.Quote(string(b)))
			if err := os.WriteFile(filepath.Join(corpusDir, name), []byte(file), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(seeds)) {
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join(corpusDir, name))
			if err != nil {
				t.Fatalf("%v (run go test -run TestFuzzCorpus -update)", err)
			}
			lit, ok := strings.CutPrefix(strings.TrimSpace(string(raw)), "go test fuzz v1\n[]byte(")
			lit, ok2 := strings.CutSuffix(lit, ")")
			if !ok || !ok2 {
				t.Fatalf("not a fuzz corpus file: %q", raw)
			}
			s, err := strconv.Unquote(lit)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			_, err = ParseClientHello([]byte(s))
			if valid := strings.HasPrefix(name, "valid-"); valid != (err == nil) {
				t.Errorf("ParseClientHello: %v", err)
			}
		})
	}
}

func FuzzParseClientHello(f *testing.F) {
	// testdata/fuzz/FuzzParseClientHello is loaded by go test itself.
	f.Add(helloRecords(defaultBody().bytes()))
	f.Fuzz(func(t *testing.T, data []byte) {
		ch, err := ParseClientHello(data)
		if err != nil {
			if !errors.Is(err, ErrNotTLS) && !errors.Is(err, ErrMalformed) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("error of no known kind: %v", err)
			}
			if d := cmp.Diff(ClientHello{}, ch); d != "" {
				t.Fatalf("result with error %v (-want +got):\n%s", err, d)
			}
			return
		}
		if ch.ServerName != "" {
			if n, err := normalizeServerName([]byte(ch.ServerName)); err != nil || n != ch.ServerName {
				t.Fatalf("server name %q is not a normalized host name: %q, %v", ch.ServerName, n, err)
			}
		}
		if len(ch.Versions) == 0 && !bytes.Contains(data, []byte{0, extSupportedVersions}) {
			t.Fatalf("no versions without a supported_versions extension")
		}
		// Parsing stops at the record that completes the ClientHello:
		// whatever follows changes nothing.
		ch2, err := ParseClientHello(append(bytes.Clone(data), 0x17, 3, 3, 0xff, 0xff))
		if err != nil {
			t.Fatalf("with bytes appended: %v", err)
		}
		if d := cmp.Diff(ch, ch2); d != "" {
			t.Fatalf("with bytes appended (-before +after):\n%s", d)
		}
	})
}
