package fastpath

import "testing"

// TestLoadVerifier loads the program through the real kernel verifier with
// the default sizes and with the benchmark switch, so a change the verifier
// rejects fails here with its log.
func TestLoadVerifier(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts LoadOptions
	}{
		{"defaults", LoadOptions{}},
		{"bench miss path", LoadOptions{BenchMissPath: true}},
		{"bench flows", LoadOptions{BenchFlows: 65536}},
		{"small tables", LoadOptions{MaglevSize: 251, MaxVIPs: 16, MaxBackends: 64, ConntrackSize: 1024, NATSize: 1024}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Load(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = objs.Close() }()
			info, err := objs.FpMaglev.Info()
			if err != nil {
				t.Fatal(err)
			}
			want := tc.opts.MaxVIPs
			if want == 0 {
				want = 4096
			}
			if info.MaxEntries != want {
				t.Errorf("fp_maglev max entries = %d, want %d", info.MaxEntries, want)
			}
		})
	}
}
