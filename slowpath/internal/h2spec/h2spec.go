// Package h2spec runs the pinned h2spec (the HTTP/2 conformance tester,
// built into bin/tools by make deps) in strict mode and reads its JUnit
// report, for the tests of the HTTP/2 server and of the proxy in front of
// it. It is test support: no production code imports it.
package h2spec

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
	"time"
)

// caseTimeout is h2spec's per-case timeout in seconds: how long a case
// waits for a frame or a close. Passing cases end as soon as the expected
// frame arrives, so a generous value only slows a failing run; a tight one
// would make a busy machine look non-conformant.
const caseTimeout = 5

// Bin returns the pinned h2spec binary, found in bin/tools under the
// module's root (the first directory above the working directory with a
// go.mod), or an error saying how to build it.
func Bin() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("h2spec: no go.mod above the working directory")
		}
		dir = parent
	}
	bin := filepath.Join(dir, "bin", "tools", "h2spec")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("h2spec is not built (%w): run make deps (hack/install-deps.sh) to build the pinned tools into bin/tools/", err)
	}
	return bin, nil
}

// Case is one h2spec test case, named as h2spec prints it
// (http2/6.5.3/2: section, then position within the section).
type Case struct {
	ID, Desc, Detail string
}

// Result is what one run reports.
type Result struct {
	Total           int
	Failed, Skipped []Case
}

// Passed is the number of cases that passed.
func (r Result) Passed() int { return r.Total - len(r.Failed) - len(r.Skipped) }

// Problems lists the cases that did not pass, with h2spec's details, or
// returns "" when every case passed.
func (r Result) Problems() string {
	if len(r.Failed) == 0 && len(r.Skipped) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d cases did not pass:\n", len(r.Failed)+len(r.Skipped), r.Total)
	for _, c := range r.Failed {
		fmt.Fprintf(&b, "  FAIL %s %s\n      %s\n", c.ID, c.Desc, strings.ReplaceAll(strings.TrimSpace(c.Detail), "\n", "\n      "))
	}
	for _, c := range r.Skipped {
		fmt.Fprintf(&b, "  SKIP %s %s\n", c.ID, c.Desc)
	}
	return b.String()
}

// Run runs bin --strict against 127.0.0.1:port (over TLS without
// verifying the certificate when useTLS), writing its report into dir,
// and returns the result and h2spec's output. The error is set when
// h2spec could not run or wrote no report, not when cases fail (h2spec
// then exits non-zero too).
func Run(ctx context.Context, bin string, port int, useTLS bool, dir string) (Result, string, error) {
	report := filepath.Join(dir, "h2spec.xml")
	args := []string{"--strict", "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-o", strconv.Itoa(caseTimeout), "-j", report}
	if useTLS {
		args = append(args, "-t", "-k")
	}
	// A bound on the whole run, in case h2spec hangs: far above what its
	// cases can take even if every one of them timed out.
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run()
	raw, err := os.ReadFile(report)
	if err != nil {
		return Result{}, out.String(), fmt.Errorf("h2spec %s wrote no report: %w", strings.Join(args, " "), errors.Join(err, runErr))
	}
	res, err := parseJUnit(raw)
	if err != nil {
		return res, out.String(), err
	}
	var exitErr *exec.ExitError
	if runErr != nil && !errors.As(runErr, &exitErr) {
		return res, out.String(), fmt.Errorf("run h2spec: %w", runErr)
	}
	if res.Total == 0 {
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

func parseJUnit(raw []byte) (Result, error) {
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
		return Result{}, fmt.Errorf("parse h2spec junit report: %w", err)
	}
	var res Result
	for _, s := range jr.Suites {
		for i, c := range s.Cases {
			res.Total++
			hc := Case{ID: fmt.Sprintf("%s/%d", s.Package, i+1), Desc: c.ClassName}
			switch {
			case c.Failure != nil:
				hc.Detail = c.Failure.Content
				res.Failed = append(res.Failed, hc)
			case c.Error != nil:
				hc.Detail = c.Error.Content
				res.Failed = append(res.Failed, hc)
			case c.Skipped != nil:
				res.Skipped = append(res.Skipped, hc)
			}
		}
	}
	return res, nil
}
