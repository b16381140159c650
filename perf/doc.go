// Package perf holds NovaEdge's benchmark harnesses (run by `make bench`).
// Every figure is recorded beside a baseline measured in the same run on
// the same machine (direct to the backend, nginx, HAProxy), because
// absolute numbers drift on shared machines; results go to perf/results/.
package perf
