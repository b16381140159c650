package snapshot

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// permute shuffles the order of every resource list in the input.
func permute(in *Input, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	shuffle := func(n int, swap func(i, j int)) { r.Shuffle(n, swap) }
	shuffle(len(in.VIPs), func(i, j int) { in.VIPs[i], in.VIPs[j] = in.VIPs[j], in.VIPs[i] })
	shuffle(len(in.Pools), func(i, j int) { in.Pools[i], in.Pools[j] = in.Pools[j], in.Pools[i] })
	shuffle(len(in.Gateways), func(i, j int) { in.Gateways[i], in.Gateways[j] = in.Gateways[j], in.Gateways[i] })
	shuffle(len(in.Routes), func(i, j int) { in.Routes[i], in.Routes[j] = in.Routes[j], in.Routes[i] })
	shuffle(len(in.Backends), func(i, j int) { in.Backends[i], in.Backends[j] = in.Backends[j], in.Backends[i] })
	shuffle(len(in.Policies), func(i, j int) { in.Policies[i], in.Policies[j] = in.Policies[j], in.Policies[i] })
	shuffle(len(in.Secrets), func(i, j int) { in.Secrets[i], in.Secrets[j] = in.Secrets[j], in.Secrets[i] })
	shuffle(len(in.Services), func(i, j int) { in.Services[i], in.Services[j] = in.Services[j], in.Services[i] })
	shuffle(len(in.EndpointSlices), func(i, j int) {
		in.EndpointSlices[i], in.EndpointSlices[j] = in.EndpointSlices[j], in.EndpointSlices[i]
	})
}

var determinismInputs = []string{"standalone.yaml", "seed-examples.yaml", "errors.yaml", "decisions.yaml", "forwarding.yaml", "services.yaml"}

// buildHex builds one permutation of one input and returns the cluster part
// and the node part's hash, hex-encoded, one line.
func buildHex(t testing.TB, input string, seed uint64, node string) string {
	in := readInput(t, "testdata/"+input)
	if input == "decisions.yaml" {
		in.Decisions = decisionsFixture()
	}
	permute(in, seed)
	s, diags := Build(in, Options{Node: Node{Name: node}, ClusterComplete: input != "standalone.yaml"})
	var d strings.Builder
	for _, x := range diags {
		d.WriteString(x.String())
	}
	return hex.EncodeToString(ClusterBytes(s)) + " " + s.ContentHash + " " + hex.EncodeToString([]byte(d.String()))
}

// TestDeterminismChild is the body run in a separate process by
// TestDeterminismAcrossProcesses; it does nothing in a normal run.
func TestDeterminismChild(t *testing.T) {
	seedStr := os.Getenv("NOVAEDGE_DETERMINISM_SEED")
	if seedStr == "" {
		return
	}
	seed, err := strconv.ParseUint(seedStr, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	for _, input := range determinismInputs {
		fmt.Printf("RESULT %s %s\n", input, buildHex(t, input, seed, os.Getenv("NOVAEDGE_DETERMINISM_NODE")))
	}
}

// TestDeterminismAcrossProcesses: random permutations of the same
// resources, built in separate processes (so map iteration order and
// allocation differ), give byte-identical cluster parts, identical content
// hashes and identical diagnostics.
func TestDeterminismAcrossProcesses(t *testing.T) {
	run := func(seed uint64, node string) map[string]string {
		cmd := exec.Command(os.Args[0], "-test.run=^TestDeterminismChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), fmt.Sprintf("NOVAEDGE_DETERMINISM_SEED=%d", seed), "NOVAEDGE_DETERMINISM_NODE="+node)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child with seed %d: %v\n%s", seed, err, out)
		}
		res := map[string]string{}
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) == 5 && f[0] == "RESULT" {
				res[f[1]] = strings.Join(f[2:], " ")
			}
		}
		if len(res) != len(determinismInputs) {
			t.Fatalf("child with seed %d printed %d results:\n%s", seed, len(res), out)
		}
		return res
	}
	seeds := []uint64{1, 2, 3, 42, 20261122}
	want := map[string]string{}
	for _, input := range determinismInputs {
		want[input] = buildHex(t, input, 0, "node-a")
	}
	for _, seed := range seeds {
		got := run(seed, "node-a")
		for _, input := range determinismInputs {
			if got[input] != want[input] {
				t.Errorf("%s: permutation %d built in another process differs from the in-process build", input, seed)
			}
		}
	}
	// Another node: the cluster part stays the same bytes.
	other := run(7, "node-b")
	for _, input := range determinismInputs {
		if a, b := strings.Fields(want[input])[0], strings.Fields(other[input])[0]; a != b {
			t.Errorf("%s: cluster part differs between node-a and node-b", input)
		}
	}
}

// Permutation sanity: shuffling really changes the order (else the test
// above would prove nothing).
func TestPermuteShuffles(t *testing.T) {
	a := readInput(t, "testdata/standalone.yaml")
	b := readInput(t, "testdata/standalone.yaml")
	changed := false
	for seed := uint64(1); seed < 10 && !changed; seed++ {
		permute(b, seed)
		for i := range a.Backends {
			if a.Backends[i].Name != b.Backends[i].Name {
				changed = true
			}
		}
	}
	if !changed {
		t.Fatal("permute never changed the order")
	}
}
