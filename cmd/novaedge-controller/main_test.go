package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestControllerSaysNotImplemented(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string // substring
		stderr string // substring
	}{
		{"default flags", nil, 1, "", "the controller is not implemented in this build yet"},
		{"every flag", []string{"--kubeconfig", "/k", "--grpc-addr", ":1", "--metrics-addr", ":2", "--leader-elect=false", "--namespace", "x", "--log-level", "debug", "--log-format", "json"}, 1, "", "not implemented"},
		{"help", []string{"--help"}, 0, "NOT IMPLEMENTED IN THIS BUILD", ""},
		{"bad log level", []string{"--log-level", "loud"}, 2, "", `--log-level "loud"`},
		{"bad log format", []string{"--log-format", "xml"}, 2, "", `--log-format "xml"`},
		{"unknown flag", []string{"--nope"}, 2, "", "unknown flag"},
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
	for _, f := range []string{"--kubeconfig", "--grpc-addr", "--metrics-addr", "--leader-elect", "--namespace", "--log-level", "--log-format"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("--help does not mention %s", f)
		}
	}
}
