package h2

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// h2specBin is where make deps (hack/install-deps.sh) builds the pinned
// h2spec, relative to this package's directory.
const h2specBin = "../../bin/tools/h2spec"

// h2specCaseTimeout is h2spec's per-case timeout in seconds. Passing cases
// end as soon as the expected frame arrives; a generous value only slows
// a failing run.
const h2specCaseTimeout = 5

// h2specHandler reads the request body, then answers with a body longer
// than one byte (the flow-control cases expect DATA frames).
func h2specHandler(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, "hello from the h2 package's test server\n")
}

// TestH2spec runs h2spec --strict (every case, SHOULDs included) against
// ServeConn with no filter in front, over h2c with prior knowledge and
// over TLS with ALPN h2; every case must pass.
func TestH2spec(t *testing.T) {
	bin, err := filepath.Abs(h2specBin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("h2spec is not built (%v): run make deps (hack/install-deps.sh) to build the pinned tools into bin/tools/", err)
	}
	for _, tc := range []struct {
		name string
		tls  bool
	}{
		{"h2c-prior-knowledge", false},
		{"h2-tls-alpn", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, tc.tls, http.HandlerFunc(h2specHandler), nil)
			_, port, _ := net.SplitHostPort(ts.addr)
			res, out, err := runH2spec(t.Context(), bin, port, tc.tls, t.TempDir())
			if err != nil {
				t.Fatalf("%v\nh2spec output:\n%s", err, out)
			}
			t.Logf("h2spec --strict %s: %d cases, %d passed, %d failed, %d skipped", tc.name, res.total, res.passed(), len(res.failed), len(res.skipped))
			if len(res.failed) > 0 || len(res.skipped) > 0 {
				var b strings.Builder
				for _, c := range res.failed {
					fmt.Fprintf(&b, "  FAIL %s %s\n      %s\n", c.id, c.desc, strings.ReplaceAll(strings.TrimSpace(c.detail), "\n", "\n      "))
				}
				for _, c := range res.skipped {
					fmt.Fprintf(&b, "  SKIP %s %s\n", c.id, c.desc)
				}
				t.Errorf("h2spec --strict: %d of %d cases did not pass:\n%s", len(res.failed)+len(res.skipped), res.total, b.String())
			}
		})
	}
}

type h2specCase struct{ id, desc, detail string }

type h2specResult struct {
	total           int
	failed, skipped []h2specCase
}

func (r h2specResult) passed() int { return r.total - len(r.failed) - len(r.skipped) }

// runH2spec runs h2spec --strict against 127.0.0.1:port and parses its
// JUnit report; the error is set when h2spec could not run or wrote no
// report, not when cases fail.
func runH2spec(ctx context.Context, bin, port string, useTLS bool, dir string) (h2specResult, string, error) {
	report := filepath.Join(dir, "h2spec.xml")
	args := []string{"--strict", "-h", "127.0.0.1", "-p", port, "-o", fmt.Sprint(h2specCaseTimeout), "-j", report}
	if useTLS {
		args = append(args, "-t", "-k")
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run()
	raw, err := os.ReadFile(report)
	if err != nil {
		return h2specResult{}, out.String(), fmt.Errorf("h2spec %s wrote no report: %w", strings.Join(args, " "), errors.Join(err, runErr))
	}
	res, err := parseJUnit(raw)
	if err != nil {
		return res, out.String(), err
	}
	var exitErr *exec.ExitError
	if runErr != nil && !errors.As(runErr, &exitErr) {
		return res, out.String(), fmt.Errorf("run h2spec: %w", runErr)
	}
	if res.total == 0 {
		return res, out.String(), errors.New("h2spec ran no test case")
	}
	return res, out.String(), nil
}

// junitReport is the part of h2spec's JUnit report read here; h2spec
// reports failing cases as <error>, so both count as failures.
type junitReport struct {
	Suites []struct {
		Package string `xml:"package,attr"`
		Cases   []struct {
			ClassName string `xml:"classname,attr"`
			Failure   *struct {
				Content string `xml:",innerxml"`
			} `xml:"failure"`
			Error *struct {
				Content string `xml:",innerxml"`
			} `xml:"error"`
			Skipped *struct{} `xml:"skipped"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

func parseJUnit(raw []byte) (h2specResult, error) {
	// h2spec copies frame payloads (PING data) into failure messages
	// verbatim; control bytes are not XML.
	raw = bytes.Map(func(r rune) rune {
		if r < 0x20 && r != '\t' && r != '\n' && r != '\r' {
			return '?'
		}
		return r
	}, raw)
	var jr junitReport
	if err := xml.Unmarshal(raw, &jr); err != nil {
		return h2specResult{}, fmt.Errorf("parse h2spec junit report: %w", err)
	}
	var res h2specResult
	for _, s := range jr.Suites {
		for i, c := range s.Cases {
			res.total++
			hc := h2specCase{id: fmt.Sprintf("%s/%d", s.Package, i+1), desc: c.ClassName}
			switch {
			case c.Failure != nil:
				hc.detail = c.Failure.Content
				res.failed = append(res.failed, hc)
			case c.Error != nil:
				hc.detail = c.Error.Content
				res.failed = append(res.failed, hc)
			case c.Skipped != nil:
				res.skipped = append(res.skipped, hc)
			}
		}
	}
	return res, nil
}
