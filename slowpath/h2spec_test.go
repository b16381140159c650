package slowpath

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/slowpath/internal/testcert"
)

// h2specBin is where hack/install-deps.sh (make deps) builds the pinned
// h2spec, relative to this package's directory.
const h2specBin = "../bin/tools/h2spec"

// h2specCaseTimeout is h2spec's per-case timeout in seconds: how long a
// case waits for a frame or a connection close. Passing cases finish as
// soon as the expected frame arrives, so a generous value only slows a
// failing run; a tight one would make a busy machine look non-conformant.
const h2specCaseTimeout = 5

// TestH2specConformance runs h2spec in strict mode (every case, including
// those for SHOULD requirements) against the slow path's HTTPS listener
// (h2 negotiated with ALPN) and its plaintext listener (h2c with prior
// knowledge); every case must pass.
func TestH2specConformance(t *testing.T) {
	bin, err := filepath.Abs(h2specBin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("h2spec is not built (%v): run make deps (hack/install-deps.sh) to build the pinned tools into bin/tools/", err)
	}
	be := echoServer(t, "echo")
	for _, tc := range []struct {
		name string
		tls  bool
	}{
		{"h2-tls-alpn", true},
		{"h2c-prior-knowledge", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			routes := []*pb.Route{route("ns/r", rule(prefix("/"), "ns/echo"))}
			backends := []*pb.Backend{backendOf("ns/echo", hostport(be))}
			if tc.tls {
				ca, err := testcert.NewCA("test")
				if err != nil {
					t.Fatal(err)
				}
				// h2spec connects to 127.0.0.1 without SNI; the listener's
				// only certificate answers.
				cert, key, err := ca.Leaf("h2spec.test")
				if err != nil {
					t.Fatal(err)
				}
				e.mustApply(e.snap(pb.Protocol_PROTOCOL_HTTPS, &pb.ListenerTLS{Certificates: []string{"ns/c"}}, routes, backends,
					&pb.Certificate{Name: "ns/c", CertPem: cert, KeyPem: key}))
			} else {
				e.mustApply(e.snap(pb.Protocol_PROTOCOL_HTTP, nil, routes, backends))
			}
			res, out, err := runH2spec(t.Context(), bin, e.port, tc.tls, t.TempDir())
			if err != nil {
				t.Fatalf("%v\nh2spec output:\n%s", err, out)
			}
			t.Logf("h2spec: %d cases, %d passed, %d failed, %d skipped", res.total, res.passed(), len(res.failed), len(res.skipped))
			if len(res.failed) > 0 || len(res.skipped) > 0 {
				var b strings.Builder
				for _, c := range res.failed {
					fmt.Fprintf(&b, "  FAIL %s %s\n%s\n", c.id, c.desc, indent(c.detail, "      "))
				}
				for _, c := range res.skipped {
					fmt.Fprintf(&b, "  SKIP %s %s\n", c.id, c.desc)
				}
				t.Errorf("h2spec --strict: %d of %d cases did not pass:\n%s", len(res.failed)+len(res.skipped), res.total, b.String())
			}
		})
	}
}

// h2specCase is one h2spec test case, named as h2spec prints it
// (http2/6.5.3/2: section, then position within the section).
type h2specCase struct {
	id, desc, detail string
}

// h2specResult is what one h2spec run reports.
type h2specResult struct {
	total           int
	failed, skipped []h2specCase
}

func (r h2specResult) passed() int { return r.total - len(r.failed) - len(r.skipped) }

// runH2spec runs h2spec --strict against 127.0.0.1:port and parses its
// JUnit report. The error is set when h2spec could not run or wrote no
// report, not when cases fail (h2spec then exits non-zero too).
func runH2spec(ctx context.Context, bin string, port uint32, useTLS bool, dir string) (h2specResult, string, error) {
	report := filepath.Join(dir, "h2spec.xml")
	args := []string{"--strict", "-h", "127.0.0.1", "-p", strconv.Itoa(int(port)), "-o", strconv.Itoa(h2specCaseTimeout), "-j", report}
	if useTLS {
		args = append(args, "-t", "-k")
	}
	// A bound on the whole run, in case h2spec hangs: far above what 145
	// cases can take even if every one of them timed out.
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
	res, err := parseH2specJUnit(raw)
	if err != nil {
		return h2specResult{}, out.String(), err
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

// junitSuites is the part of h2spec's JUnit report the test reads. h2spec
// reports every failing case as <error> (its <failure> branch is
// unreachable), so both count as failures.
type junitSuites struct {
	Suites []struct {
		Package string `xml:"package,attr"`
		Cases   []struct {
			ClassName string    `xml:"classname,attr"`
			Failure   *junitMsg `xml:"failure"`
			Error     *junitMsg `xml:"error"`
			Skipped   *junitMsg `xml:"skipped"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

type junitMsg struct {
	Content string `xml:",innerxml"`
}

func parseH2specJUnit(raw []byte) (h2specResult, error) {
	var js junitSuites
	if err := xml.Unmarshal(raw, &js); err != nil {
		return h2specResult{}, fmt.Errorf("parse h2spec junit report: %w", err)
	}
	var res h2specResult
	for _, s := range js.Suites {
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

func indent(s, prefix string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}
