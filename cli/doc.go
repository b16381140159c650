// Package cli implements novaedgectl, the NovaEdge command-line tool:
// validating configuration files offline, and inspecting and reloading a
// running agent through its admin API on a Unix socket.
//
// cmd/novaedgectl only calls Execute; every command, flag and output format
// lives here so tests can run the commands in-process.
package cli
