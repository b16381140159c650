package cli

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// Exit codes of novaedgectl.
const (
	// ExitOK: the command succeeded (validate: no errors, warnings allowed).
	ExitOK = 0
	// ExitFailure: the configuration has errors, or the command failed
	// (agent unreachable, reload rejected).
	ExitFailure = 1
	// ExitUsage: unknown command or flag, or wrong arguments.
	ExitUsage = 2
)

// DefaultSocket is where the agent serves its admin API.
const DefaultSocket = "/run/novaedge/agent.sock"

// options are the flags shared by every command.
type options struct {
	socket  string
	timeout time.Duration
	version string
}

// exitError ends a command with a code; a nil err means everything to say
// has been said.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// usageError marks errors in how the command was called.
func usageError(err error) error { return &exitError{code: ExitUsage, err: err} }

// Execute runs novaedgectl with args (without the program name) and returns
// the exit code. version is printed by --version.
func Execute(args []string, stdout, stderr io.Writer, version string) int {
	root := NewCommand(version)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return ExitOK
	}
	code := ExitFailure
	if ee, ok := errors.AsType[*exitError](err); ok {
		code = ee.code
		err = ee.err
	} else if isUsage(err) {
		code = ExitUsage
	}
	if err != nil {
		// Nothing is left to tell a caller whose stderr fails.
		_, _ = fmt.Fprintf(stderr, "novaedgectl: %v\n", err)
		if code == ExitUsage {
			_, _ = fmt.Fprintln(stderr, "Run 'novaedgectl --help' for usage.")
		}
	}
	return code
}

// isUsage recognises cobra's own errors about commands and arguments,
// which it returns as plain errors.
func isUsage(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "unknown command") || strings.HasPrefix(msg, "unknown flag") ||
		strings.HasPrefix(msg, "unknown shorthand flag") || strings.Contains(msg, "flag needs an argument") ||
		strings.HasPrefix(msg, "invalid argument") || strings.HasPrefix(msg, "accepts ") ||
		strings.HasPrefix(msg, "requires at least")
}

// NewCommand returns the novaedgectl root command with every subcommand.
func NewCommand(version string) *cobra.Command {
	o := &options{version: version}
	root := &cobra.Command{
		Use:   "novaedgectl",
		Short: "Validate NovaEdge configuration and inspect a running agent",
		Long: `novaedgectl validates NovaEdge configuration files offline and inspects a
running novaedge-agent through its admin API (gRPC on a Unix socket).

Offline:
  validate   check YAML files exactly as the agent and a kube-apiserver would

Against a running agent (--socket):
  status     what the agent serves, whether it is ready, kernel features
  snapshot   the ConfigSnapshot being served (JSON or YAML)
  plan       per VIP address:port, fast path (XDP) or slow path (Go proxy), and why
  errors     diagnostics of the served configuration and of the last rejected one
  reload     make a standalone agent re-read its configuration files
  vip status VIP announcements: mode, role, interfaces, announced or why not
  bgp peers  BGP sessions;  bgp routes  the host routes announced
  bfd        BFD sessions with the BGP peers
  ospf       OSPF through FRR: neighbours, VIP routes, problems (e.g. md5 mismatch)

Exit status: 0 on success, 1 when the configuration has errors or the command
failed, 2 on a usage error.`,
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
		CompletionOptions: cobra.CompletionOptions{
			DisableDefaultCmd: true,
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
	pf := root.PersistentFlags()
	pf.StringVar(&o.socket, "socket", DefaultSocket, "Unix socket of the agent's admin API (the agent's --admin-socket)")
	pf.DurationVar(&o.timeout, "timeout", 5*time.Second, "how long to wait for the agent to answer")

	root.AddCommand(
		newValidateCommand(o),
		newStatusCommand(o),
		newSnapshotCommand(o),
		newPlanCommand(o),
		newErrorsCommand(o),
		newReloadCommand(o),
		newVIPCommand(o),
		newBGPCommand(o),
		newBFDCommand(o),
		newOSPFCommand(o),
		newFastpathCommand(),
		newDecapCommand(),
		newDemoBackendCommand(),
	)
	return root
}

// outputFlag adds -o/--output with the given choices, the first being the
// default, and returns a function that checks the value.
func outputFlag(cmd *cobra.Command, dst *string, help string, choices ...string) {
	cmd.Flags().StringVarP(dst, "output", "o", choices[0], fmt.Sprintf("output format: %s (%s)", strings.Join(choices, " or "), help))
	prev := cmd.PreRunE
	cmd.PreRunE = func(c *cobra.Command, args []string) error {
		if !slices.Contains(choices, *dst) {
			return usageError(fmt.Errorf("--output %q: must be %s", *dst, strings.Join(choices, " or ")))
		}
		if prev != nil {
			return prev(c, args)
		}
		return nil
	}
}

// noArgs rejects positional arguments as a usage error.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError(fmt.Errorf("unexpected argument %q", args[0]))
	}
	return nil
}

// plural returns "1 error" or "2 errors".
func plural(n int, word string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}
