// Package examples embeds the example configurations, so the standalone
// agent can serve the demo configuration when started without --config and
// tests can load exactly what users read.
package examples

import _ "embed"

// StandaloneName is the repository path of Standalone, for positions in
// diagnostics (manifest.Parse(StandaloneName, Standalone)).
const StandaloneName = "deploy/examples/standalone.yaml"

// Standalone is standalone.yaml: a Local VIP on 127.0.10.1 with an HTTP
// listener (port 8080) and a TCP listener (port 9000) in front of static
// loopback backends. It validates with no diagnostics.
//
//go:embed standalone.yaml
var Standalone []byte
