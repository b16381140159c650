package kernel

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func TestParseRelease(t *testing.T) {
	tests := []struct {
		in      string
		want    Release
		wantErr bool
	}{
		{in: "6.18.0-1-amd64", want: Release{6, 18}},
		{in: "5.15.0", want: Release{5, 15}},
		{in: "5.4", want: Release{5, 4}},
		{in: "6.1-rc3", want: Release{6, 1}},
		{in: "6.10+", want: Release{6, 10}},
		{in: "6", wantErr: true},
		{in: "x.1", wantErr: true},
		{in: "6.y", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseRelease(tc.in)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("ParseRelease(%q) = %v, want an error", tc.in, got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseRelease(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestReleaseLess(t *testing.T) {
	tests := []struct {
		a, b Release
		want bool
	}{
		{Release{5, 4}, MinRelease, true},
		{Release{4, 19}, MinRelease, true},
		{Release{5, 15}, MinRelease, false},
		{Release{6, 0}, MinRelease, false},
	}
	for _, tc := range tests {
		if got := tc.a.Less(tc.b); got != tc.want {
			t.Errorf("%v.Less(%v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestRunReportsFailuresWithWhatTheyBreak(t *testing.T) {
	got := Run([]Probe{
		{Name: "ok", Needed: "x", Check: func() (string, error) { return "fine", nil }},
		{Name: "bad", Needed: "the demo", Check: func() (string, error) { return "", errors.New("gone") }},
	})
	if len(got) != 2 || !got[0].Available || got[0].Detail != "fine" {
		t.Fatalf("first feature = %+v", got[0])
	}
	if got[1].Available || got[1].Detail != "gone; needed for the demo" {
		t.Fatalf("second feature = %+v", got[1])
	}
	if m := Missing(got); len(m) != 1 || m[0].Name != "bad" {
		t.Fatalf("Missing = %+v", m)
	}
}

// TestProbesOnThisMachine runs the real probes. The CI machine (kernel 6.18,
// root) has every feature, so a missing one here is a probe bug or a broken
// machine; both must fail loudly.
func TestProbesOnThisMachine(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test probes BPF features and needs root: run make test as root")
	}
	fs := Run(Probes())
	if len(fs) != len(Probes()) {
		t.Fatalf("got %d features for %d probes", len(fs), len(Probes()))
	}
	for _, f := range fs {
		if !f.Available {
			t.Errorf("feature %s not available: %s", f.Name, f.Detail)
		}
		if f.Name == "kernel-release" && !strings.Contains(f.Detail, "minimum 5.15") {
			t.Errorf("kernel-release detail %q does not name the minimum", f.Detail)
		}
	}
}
