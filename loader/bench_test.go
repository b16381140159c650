package loader

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/novaedge/novaedge/internal/benchconfig"
)

// routesYAML is a configuration of a gateway, a backend and n routes, the
// shape perf/routescale serves.
func routesYAML(n int) string {
	return benchconfig.YAML(benchconfig.Options{
		VIP: netip.MustParseAddr("192.0.2.10"), Backend: netip.MustParseAddrPort("192.0.2.20:8080"), Ports: []int{8080}, Routes: n,
	})
}

// BenchmarkReload loads a file of 3000 routes that gained one route since
// the last load, as a standalone agent does after an edit: one chunk is
// new, the others are reused.
func BenchmarkReload(b *testing.B) {
	path := filepath.Join(b.TempDir(), "routes.yaml")
	versions := []string{routesYAML(3000), routesYAML(3001)}
	if err := os.WriteFile(path, []byte(versions[0]), 0o644); err != nil {
		b.Fatal(err)
	}
	res, diags := Load(path)
	if len(diags) > 0 || len(res.Input.Routes) != 3000 {
		b.Fatalf("%d routes, diagnostics %v", len(res.Input.Routes), diags)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		b.StopTimer()
		if err := os.WriteFile(path, []byte(versions[i%2]), 0o644); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		res, _ := Load(path)
		if len(res.Input.Routes) != 3000+i%2 {
			b.Fatalf("%d routes, want %d", len(res.Input.Routes), 3000+i%2)
		}
	}
}

// BenchmarkReloadCold loads a file of 3000 routes after the last load's
// Validator was replaced by a fresh one and its chunks put to rest
// (validatorHold), as for the first edit after a quiet spell: "at-rest"
// with what they leave at rest (restCache), "nothing" without it (every
// document parsed and validated again, as by a first load).
func BenchmarkReloadCold(b *testing.B) {
	path := filepath.Join(b.TempDir(), "routes.yaml")
	if err := os.WriteFile(path, []byte(routesYAML(3000)), 0o644); err != nil {
		b.Fatal(err)
	}
	for _, state := range []string{"at-rest", "nothing"} {
		b.Run(state, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				Load(path)
				held.mu.Lock()
				use := held.use
				held.mu.Unlock()
				releaseValidator(use)
				if state == "nothing" {
					held.mu.Lock()
					held.rest = nil
					held.mu.Unlock()
				}
				b.StartTimer()
				res, diags := Load(path)
				if len(diags) > 0 || len(res.Input.Routes) != 3000 {
					b.Fatalf("%d routes, diagnostics %v", len(res.Input.Routes), diags)
				}
			}
		})
	}
}
