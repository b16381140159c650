package main

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBinaryExitCodes builds novaedgectl and checks the exit status and
// output of the real process for the shipped examples.
func TestBinaryExitCodes(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "novaedgectl")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	tests := []struct {
		args   []string
		code   int
		stdout string // last line
	}{
		{[]string{"validate", "../../deploy/examples/standalone.yaml"}, 0, "0 errors, 0 warnings"},
		{[]string{"validate", "../../deploy/examples/invalid"}, 1, "4 errors, 1 warning"},
		{[]string{"validate"}, 2, ""},
	}
	for _, tc := range tests {
		cmd := exec.Command(bin, tc.args...)
		var stdout strings.Builder
		cmd.Stdout = &stdout
		err := cmd.Run()
		code := 0
		if ee, ok := errors.AsType[*exec.ExitError](err); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		if code != tc.code || lines[len(lines)-1] != tc.stdout {
			t.Errorf("novaedgectl %v: exit %d, last line %q; want %d, %q", tc.args, code, lines[len(lines)-1], tc.code, tc.stdout)
		}
	}
}
