package attach

import (
	"flag"
	"io"
	"testing"
)

func TestModeText(t *testing.T) {
	tests := []struct {
		in      string
		want    Mode
		wantErr bool
	}{
		{in: "auto", want: ModeAuto},
		{in: "native", want: ModeNative},
		{in: "Native", want: ModeNative},
		{in: "drv", want: ModeNative},
		{in: "generic", want: ModeGeneric},
		{in: "skb", want: ModeGeneric},
		{in: "offload", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			var m Mode
			err := m.UnmarshalText([]byte(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("UnmarshalText(%q) error = %v, want error: %v", tc.in, err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if m != tc.want {
				t.Errorf("UnmarshalText(%q) = %s, want %s", tc.in, m, tc.want)
			}
			text, err := m.MarshalText()
			if err != nil {
				t.Fatal(err)
			}
			if back, err := ParseMode(string(text)); err != nil || back != m {
				t.Errorf("round trip of %s through %q gave %s, %v", m, text, back, err)
			}
		})
	}
}

// TestModeFlag shows the intended use as --xdp-mode.
func TestModeFlag(t *testing.T) {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var m Mode
	fs.TextVar(&m, "xdp-mode", ModeAuto, "XDP attach mode: auto, native or generic")
	if err := fs.Parse([]string{"--xdp-mode=generic"}); err != nil {
		t.Fatal(err)
	}
	if m != ModeGeneric {
		t.Errorf("--xdp-mode=generic parsed as %s", m)
	}
	if err := fs.Parse([]string{"--xdp-mode=bogus"}); err == nil {
		t.Error("--xdp-mode=bogus accepted")
	}
}
