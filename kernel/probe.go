package kernel

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"

	"github.com/novaedge/novaedge/kernel/internal/sysinfo"
)

// MinRelease is the oldest kernel NovaEdge supports: 5.15 is the first LTS
// release with everything the fast path needs (bpf_fib_lookup with VLANs,
// BTF everywhere, sockmap for TCP, XDP on veth without a peer program in
// generic mode).
var MinRelease = Release{Major: 5, Minor: 15}

// Release is a kernel version, major.minor.
type Release struct {
	Major, Minor int
}

// String returns "major.minor".
func (r Release) String() string { return fmt.Sprintf("%d.%d", r.Major, r.Minor) }

// Less reports whether r is older than o.
func (r Release) Less(o Release) bool {
	return r.Major < o.Major || (r.Major == o.Major && r.Minor < o.Minor)
}

// ParseRelease reads the major.minor prefix of a uname release string such
// as "6.18.0-1-amd64".
func ParseRelease(s string) (Release, error) {
	fields := strings.SplitN(s, ".", 3)
	if len(fields) < 2 {
		return Release{}, fmt.Errorf("kernel release %q: want major.minor", s)
	}
	major, err := strconv.Atoi(fields[0])
	if err != nil {
		return Release{}, fmt.Errorf("kernel release %q: major: %w", s, err)
	}
	minor := fields[1]
	if i := strings.IndexFunc(minor, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minor = minor[:i]
	}
	m, err := strconv.Atoi(minor)
	if err != nil {
		return Release{}, fmt.Errorf("kernel release %q: minor: %w", s, err)
	}
	return Release{Major: major, Minor: m}, nil
}

// Feature is one probed capability.
type Feature struct {
	// Name is short and stable ("kernel-release", "xdp", ...): metrics
	// label it.
	Name string
	// Available is true when the feature works here.
	Available bool
	// Detail says what was found, or what is missing and what it breaks.
	Detail string
}

// Probe is one check; Probes are the checks Run performs, in order.
type Probe struct {
	Name string
	// Needed says what does not work without the feature.
	Needed string
	// Check returns a description of what was found, or an error.
	Check func() (string, error)
}

// Probes returns the checks for NovaEdge's needs.
func Probes() []Probe {
	prog := func(pt ebpf.ProgramType) func() (string, error) {
		return func() (string, error) {
			return "loads", features.HaveProgramType(pt)
		}
	}
	mapType := func(mt ebpf.MapType) func() (string, error) {
		return func() (string, error) {
			return "creates", features.HaveMapType(mt)
		}
	}
	return []Probe{
		{Name: "kernel-release", Needed: "NovaEdge", Check: checkRelease},
		{Name: "bpffs", Needed: "pinning the fast path across agent restarts", Check: checkBPFFS},
		{Name: "cgroup-v2", Needed: "sockmap splicing (sockops attaches to a cgroup v2)", Check: checkCgroup2},
		{Name: "xdp", Needed: "the XDP fast path", Check: prog(ebpf.XDP)},
		{Name: "tc-bpf", Needed: "the DSR decapsulation program on backends", Check: prog(ebpf.SchedCLS)},
		{Name: "sk-msg", Needed: "sockmap splicing", Check: prog(ebpf.SkMsg)},
		{Name: "sockhash", Needed: "sockmap splicing", Check: mapType(ebpf.SockHash)},
		{Name: "lpm-trie", Needed: "VIP prefix matching in the fast path", Check: mapType(ebpf.LPMTrie)},
		{Name: "map-in-map", Needed: "atomic Maglev table swaps", Check: mapType(ebpf.ArrayOfMaps)},
		{Name: "lru-hash", Needed: "fast-path connection tracking", Check: mapType(ebpf.LRUHash)},
		{Name: "fib-lookup", Needed: "fast-path forwarding (bpf_fib_lookup)", Check: func() (string, error) {
			return "helper available to XDP", features.HaveProgramHelper(ebpf.XDP, asm.FnFibLookup)
		}},
	}
}

// Run performs the probes and returns one Feature per probe, in order.
func Run(probes []Probe) []Feature {
	out := make([]Feature, 0, len(probes))
	for _, p := range probes {
		detail, err := p.Check()
		f := Feature{Name: p.Name, Available: err == nil, Detail: detail}
		if err != nil {
			f.Detail = describe(err) + "; needed for " + p.Needed
		}
		out = append(out, f)
	}
	return out
}

// Missing returns the features that are not available.
func Missing(fs []Feature) []Feature {
	var out []Feature
	for _, f := range fs {
		if !f.Available {
			out = append(out, f)
		}
	}
	return out
}

func describe(err error) string {
	switch {
	case errors.Is(err, ebpf.ErrNotSupported):
		return "not supported by this kernel"
	case sysinfo.IsPermission(err):
		return "not permitted (run as root or with CAP_BPF and CAP_NET_ADMIN)"
	}
	return err.Error()
}

func checkRelease() (string, error) {
	s, err := sysinfo.Release()
	if err != nil {
		return "", err
	}
	r, err := ParseRelease(s)
	if err != nil {
		return "", err
	}
	if r.Less(MinRelease) {
		return "", fmt.Errorf("kernel %s is older than the minimum %s", s, MinRelease)
	}
	return fmt.Sprintf("%s (minimum %s)", s, MinRelease), nil
}

// BPFFSPath is where BPF objects are pinned.
const BPFFSPath = "/sys/fs/bpf"

// checkBPFFS accepts a kernel that supports bpffs even when it is not
// mounted yet: the fast path mounts it, as Cilium's agent does.
func checkBPFFS() (string, error) {
	if magic, err := sysinfo.FSMagic(BPFFSPath); err == nil && magic == sysinfo.BPFFSMagic {
		return "mounted at " + BPFFSPath, nil
	}
	fss, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return "", fmt.Errorf("read /proc/filesystems: %w", err)
	}
	for _, line := range strings.Split(string(fss), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[len(f)-1] == "bpf" {
			return "supported, not mounted at " + BPFFSPath + " yet (the fast path mounts it)", nil
		}
	}
	return "", errors.New("the kernel has no bpf filesystem")
}

// cgroupPaths are where a cgroup v2 hierarchy is commonly mounted: the
// unified mode root, and the hybrid mode's unified subdirectory.
var cgroupPaths = []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}

// Cgroup2Path returns the first cgroup v2 mount of cgroupPaths.
func Cgroup2Path() (string, error) {
	for _, p := range cgroupPaths {
		if magic, err := sysinfo.FSMagic(p); err == nil && magic == sysinfo.Cgroup2Magic {
			return p, nil
		}
	}
	return "", fmt.Errorf("no cgroup v2 mount at %s", strings.Join(cgroupPaths, " or "))
}

func checkCgroup2() (string, error) {
	p, err := Cgroup2Path()
	if err != nil {
		return "", err
	}
	return "cgroup2 at " + p, nil
}
