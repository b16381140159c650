package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
)

// run executes novaedgectl in-process.
func run(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = Execute(args, &out, &errb, "test")
	return code, out.String(), errb.String()
}

const (
	standalone = "../deploy/examples/standalone.yaml"
	invalid    = "../deploy/examples/invalid/"
)

func TestValidateStandaloneExample(t *testing.T) {
	code, out, errOut := run("validate", standalone)
	if code != ExitOK || out != "0 errors, 0 warnings\n" || errOut != "" {
		t.Errorf("validate %s: exit %d, stdout %q, stderr %q; want 0, \"0 errors, 0 warnings\\n\", \"\"", standalone, code, out, errOut)
	}
}

// TestValidateInvalidExample is the acceptance check: the four mistakes of
// deploy/examples/invalid are all reported in one run, each naming its
// resource and field at the right line.
func TestValidateInvalidExample(t *testing.T) {
	code, out, _ := run("validate", invalid)
	if code != ExitFailure {
		t.Errorf("exit %d, want %d", code, ExitFailure)
	}
	const file = "../deploy/examples/invalid/standalone-broken.yaml"
	want := []string{
		// (a) an unknown field
		file + `:61: error: ProxyRoute demo/web: spec.hostname: unknown field "spec.hostname"`,
		// (b) a route to a missing backend
		file + `:109: error: ProxyRoute demo/tcp-echo: spec.rules[0].backendRefs[0].name: ProxyBackend demo/demo-tpc not found`,
		// (d) a port of 70000
		file + `:161: error: ProxyBackend demo/demo-web-canary: spec.endpoints[0].port: Invalid value: 70000: spec.endpoints[0].port in body should be less than or equal to 65535`,
		// (c) an invalid CIDR
		file + `:205: error: ProxyIPPool demo-pool: spec.cidrs[0]: Invalid value: "10.300.0.0/24": must be a CIDR`,
	}
	var errs []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.Contains(l, ": error: ") {
			errs = append(errs, l)
		}
	}
	if len(errs) != len(want) {
		t.Errorf("got %d errors, want %d:\n%s", len(errs), len(want), out)
	}
	for i := range min(len(errs), len(want)) {
		if !strings.HasPrefix(errs[i], want[i]) {
			t.Errorf("error %d:\n got %s\nwant %s…", i, errs[i], want[i])
		}
	}
	if !regexp.MustCompile(`(?m)^4 errors, \d+ warnings?\n\z`).MatchString(out) {
		t.Errorf("summary: want a last line \"4 errors, N warnings\", got:\n%s", out)
	}

	// Each reported line is the one right after a "MISTAKE" comment.
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	src := strings.Split(string(data), "\n")
	for _, w := range want {
		n, _ := strconv.Atoi(strings.Split(strings.TrimPrefix(w, file+":"), ":")[0])
		if n < 2 || n > len(src) || !strings.Contains(src[n-2], "# MISTAKE") {
			t.Errorf("line %d of %s does not follow a MISTAKE comment", n, file)
		}
	}
}

func TestValidateJSON(t *testing.T) {
	code, out, _ := run("validate", "-o", "json", invalid)
	if code != ExitFailure {
		t.Errorf("exit %d, want %d", code, ExitFailure)
	}
	var rep validateReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if rep.Errors != 4 || len(rep.Diagnostics) != rep.Errors+rep.Warnings {
		t.Errorf("errors %d, warnings %d, %d diagnostics; want 4 errors and one diagnostic each", rep.Errors, rep.Warnings, len(rep.Diagnostics))
	}
	var fields []string
	for _, d := range rep.Diagnostics {
		if d.Severity == "error" {
			if d.Position.File == "" || d.Position.Line == 0 || d.Resource.Kind == "" {
				t.Errorf("error without position or resource: %+v", d)
			}
			fields = append(fields, d.Resource.String()+" "+d.Field)
		}
	}
	want := []string{
		"ProxyRoute demo/web spec.hostname",
		"ProxyRoute demo/tcp-echo spec.rules[0].backendRefs[0].name",
		"ProxyBackend demo/demo-web-canary spec.endpoints[0].port",
		"ProxyIPPool demo-pool spec.cidrs[0]",
	}
	if diff := cmp.Diff(want, fields); diff != "" {
		t.Errorf("errors (-want +got):\n%s", diff)
	}

	code, out, _ = run("validate", "-o", "json", standalone)
	rep = validateReport{}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != ExitOK {
		t.Fatalf("exit %d, %v:\n%s", code, err, out)
	}
	var paths []string
	for _, p := range rep.Plan {
		paths = append(paths, hostPort(p.Address, p.Port)+"/"+p.Protocol+" "+p.Path)
	}
	if diff := cmp.Diff([]string{"127.0.10.1:8080/tcp SLOW", "127.0.10.1:9000/tcp FAST"}, paths); diff != "" {
		t.Errorf("plan of the standalone example (-want +got):\n%s", diff)
	}
}

func TestValidatePlanText(t *testing.T) {
	code, out, _ := run("validate", "--plan", standalone)
	if code != ExitOK {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, want := range []string{
		"VIP       ADDRESS              PATH  LISTENER        REASONS\n",
		"demo-vip  127.0.10.1:8080/tcp  SLOW  demo/demo/http  HTTP listener",
		"demo-vip  127.0.10.1:9000/tcp  FAST  demo/demo/tcp   TCP listener with one route and only backendRefs",
		"\n0 errors, 0 warnings\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestValidateUsageAndFailures(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		code       int
		stdout     string // prefix
		stderrPart string
	}{
		{"no paths", []string{"validate"}, ExitUsage, "", "validate needs at least one file or directory"},
		{"bad output", []string{"validate", "-o", "xml", standalone}, ExitUsage, "", `--output "xml": must be text or json`},
		{"unknown flag", []string{"validate", "--nope", standalone}, ExitUsage, "", "unknown flag: --nope"},
		{"unknown command", []string{"frobnicate"}, ExitUsage, "", "unknown command"},
		{"missing file", []string{"validate", "does-not-exist.yaml"}, ExitFailure, "does-not-exist.yaml: error: stat does-not-exist.yaml: no such file or directory\n1 error, 0 warnings\n", ""},
		{"version", []string{"--version"}, ExitOK, "novaedgectl version test\n", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := run(tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d (stdout %q, stderr %q)", code, tc.code, out, errOut)
			}
			if !strings.HasPrefix(out, tc.stdout) {
				t.Errorf("stdout %q, want prefix %q", out, tc.stdout)
			}
			if !strings.Contains(errOut, tc.stderrPart) {
				t.Errorf("stderr %q, want it to contain %q", errOut, tc.stderrPart)
			}
		})
	}
}

// TestHelpExplainsEveryFlag checks that every command and flag has help
// text, and that --help works everywhere.
func TestHelpExplainsEveryFlag(t *testing.T) {
	root := NewCommand("test")
	cmds := append(root.Commands(), root)
	for _, c := range cmds {
		if c.Short == "" {
			t.Errorf("command %q has no short description", c.Name())
		}
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if strings.TrimSpace(f.Usage) == "" {
				t.Errorf("%s --%s has no help", c.Name(), f.Name)
			}
		})
		args := []string{c.Name(), "--help"}
		if c == root {
			args = []string{"--help"}
		}
		code, out, _ := run(args...)
		if code != ExitOK || !strings.Contains(out, "Usage:") {
			t.Errorf("%v: exit %d, output %q", args, code, out)
		}
	}
}
