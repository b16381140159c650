// Package kernel probes the running kernel for the features NovaEdge uses
// (kernel release, BPF program and map types, bpffs, cgroup v2), so the agent
// can say at start what is missing instead of failing later in a way that
// names a syscall rather than the feature.
package kernel
