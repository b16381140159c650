package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

func TestControllerFlags(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.kubeconfig")
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string // substring
		stderr string // substring
	}{
		{"help", []string{"--help"}, 0, "streams a versioned ConfigSnapshot", ""},
		{"bad log level", []string{"--log-level", "loud"}, 2, "", `--log-level "loud"`},
		{"bad log format", []string{"--log-format", "xml"}, 2, "", `--log-format "xml"`},
		{"empty grpc address", []string{"--grpc-addr", ""}, 2, "", "--grpc-addr: must not be empty"},
		{"unknown flag", []string{"--nope"}, 2, "", "unknown flag"},
		{"maglev lineage not a bool", []string{"--maglev-lineage=maybe"}, 2, "", `invalid argument "maybe" for "--maglev-lineage"`},
		{"zero qps", []string{"--kube-api-qps", "0"}, 2, "", "--kube-api-qps and --kube-api-burst: must be positive"},
		{"kubeconfig missing", []string{"--kubeconfig", missing}, 2, "", "kubernetes configuration (--kubeconfig"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(tc.args, &out, &errb)
			if code != tc.code || !strings.Contains(out.String(), tc.stdout) || !strings.Contains(errb.String(), tc.stderr) {
				t.Errorf("exit %d (want %d)\nstdout %q (want %q)\nstderr %q (want %q)", code, tc.code, out.String(), tc.stdout, errb.String(), tc.stderr)
			}
		})
	}
}

func TestControllerHelpExplainsEveryFlag(t *testing.T) {
	var out bytes.Buffer
	run([]string{"--help"}, &out, &out)
	for _, f := range []string{"--kubeconfig", "--grpc-addr", "--metrics-addr", "--health-addr", "--leader-elect", "--namespace", "--pod-name", "--default-lb-class", "--maglev-lineage", "--kube-api-qps", "--kube-api-burst", "--log-level", "--log-format"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("--help does not mention %s", f)
		}
	}
}
