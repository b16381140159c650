package cli

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/novaedge/novaedge/fastpath/attach"
	"github.com/novaedge/novaedge/fastpath/decap"
)

// DefaultDecapRoot is where `novaedgectl decap` pins the decapsulation
// program's links and maps.
const DefaultDecapRoot = "/sys/fs/bpf/novaedge-decap"

const decapLayout = "v1"

func newDecapCommand() *cobra.Command {
	var root string
	cmd := &cobra.Command{
		Use:   "decap",
		Short: "Install the DSR decapsulation program on a backend (for DSR with IPIP or GUE)",
		Long: `With DSR forwarding (ProxyVIP spec.forwarding.mode: DSR, encapsulation IPIP or
GUE), NovaEdge sends a VIP's packets to the backend inside an outer IP (or
IP+UDP) header. Many kernels lack the ipip/ip6tnl/fou drivers that would
remove it, so NovaEdge ships a small XDP program that does. Run on every
backend:

  novaedgectl decap attach eth0          # and the VIP on lo: ip addr add VIP/32 dev lo

The backend then receives the client's original packet (to the VIP) and
answers the client directly. The program stays attached after the command
exits (its links and maps are pinned under --bpf-root); "decap detach"
removes it.`,
		SilenceUsage: true,
	}
	cmd.PersistentFlags().StringVar(&root, "bpf-root", DefaultDecapRoot, "where the program's links and maps are pinned")

	var (
		guePort uint16
		local   []string
		mode    string
	)
	attachCmd := &cobra.Command{
		Use:   "attach INTERFACE...",
		Short: "attach (or update) the decapsulation program on interfaces",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError(fmt.Errorf("name at least one interface"))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := attach.ParseMode(mode)
			if err != nil {
				return usageError(fmt.Errorf("--mode: %w", err))
			}
			var addrs []netip.Addr
			for _, s := range local {
				a, err := netip.ParseAddr(s)
				if err != nil {
					return usageError(fmt.Errorf("--local-address %q: %w", s, err))
				}
				addrs = append(addrs, a)
			}
			if err := attach.Supported(); err != nil {
				return &exitError{code: ExitFailure, err: err}
			}
			targets, err := attach.Resolve(args)
			if err != nil {
				return &exitError{code: ExitFailure, err: err}
			}
			maps := filepath.Join(root, decapLayout, "maps")
			if err := os.MkdirAll(maps, 0o700); err != nil {
				return &exitError{code: ExitFailure, err: err}
			}
			d, err := decap.Load(decap.Options{GUEPort: guePort, LocalAddrs: addrs, PinPath: maps})
			if err != nil {
				return &exitError{code: ExitFailure, err: err}
			}
			defer func() { _ = d.Close() }()
			att, err := attach.New(attach.Options{Root: root, LayoutVersion: decapLayout, Mode: m})
			if err != nil {
				return &exitError{code: ExitFailure, err: err}
			}
			// Closing the handles leaves the pinned links attached.
			defer func() { _ = att.Close() }()
			res, err := att.Adopt(d.Program(), targets)
			if res != nil {
				for _, o := range res.Interfaces {
					_, _ = fmt.Fprintf(cmd.OutOrStdout(), "%s: %s, %s mode\n", o.Target, o.Action, o.Mode)
				}
			}
			if err != nil {
				return &exitError{code: ExitFailure, err: err}
			}
			return nil
		},
	}
	attachCmd.Flags().Uint16Var(&guePort, "gue-port", decap.DefaultGUEPort, "UDP port of GUE packets (the VIP's forwarding.guePort)")
	attachCmd.Flags().StringArrayVar(&local, "local-address", nil, "decapsulate only packets whose outer destination is this address (repeatable); default: any")
	attachCmd.Flags().StringVar(&mode, "mode", "auto", "XDP mode: auto, native or generic")

	detachCmd := &cobra.Command{
		Use:   "detach",
		Short: "detach the decapsulation program from every interface and remove its pins",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pins, err := attach.DetachAll(root)
			for _, p := range pins {
				_, _ = fmt.Fprintf(cmd.OutOrStdout(), "detached %s\n", p.Ifname)
			}
			if err != nil {
				return &exitError{code: ExitFailure, err: err}
			}
			if err := os.RemoveAll(root); err != nil {
				return &exitError{code: ExitFailure, err: err}
			}
			return nil
		},
	}

	var output string
	statsCmd := &cobra.Command{
		Use:   "stats",
		Short: "packets decapsulated, passed and dropped",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := decap.PinnedStats(filepath.Join(root, decapLayout, "maps"))
			if err != nil {
				return &exitError{code: ExitFailure, err: err}
			}
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), c)
			}
			p := &printer{w: cmd.OutOrStdout()}
			p.printf("decapsulated %d (ipip %d, ip6ip6 %d, ip6-in-ip4 %d, ip4-in-ip6 %d, gue/ipv4 %d, gue/ipv6 %d)\n",
				c.Decapsulated(), c.IP4InIP4, c.IP6InIP6, c.IP6InIP4, c.IP4InIP6, c.GUEIP4, c.GUEIP6)
			p.printf("passed %d, not local %d, fragments %d, malformed %d\n", c.Passed, c.NotLocal, c.Fragments, c.Malformed)
			return p.err
		},
	}
	outputFlag(statsCmd, &output, "json has every counter", "table", "json")
	cmd.AddCommand(attachCmd, detachCmd, statsCmd)
	return cmd
}
