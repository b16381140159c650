// Command novaedgectl validates NovaEdge configuration files and inspects a
// running novaedge-agent. See package cli.
package main

import (
	"os"

	"github.com/novaedge/novaedge/cli"
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	os.Exit(cli.Execute(os.Args[1:], os.Stdout, os.Stderr, version))
}
