// Package stopsig names the signals that ask a test binary to stop. The os
// package names only os.Interrupt and os.Kill, and raw signal numbers stay in
// internal packages (see .golangci.yml), so kubeenv gets them from here.
package stopsig
