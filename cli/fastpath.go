package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/novaedge/novaedge/fastpath"
	"github.com/novaedge/novaedge/fastpath/attach"
	"github.com/novaedge/novaedge/fastpath/datapath"
)

// fastpathOptions are the flags of the fastpath commands, which read the
// pinned maps directly (no agent needed: the fast path runs without one).
type fastpathOptions struct {
	root   string
	output string
}

func newFastpathCommand() *cobra.Command {
	fo := &fastpathOptions{}
	cmd := &cobra.Command{
		Use:   "fastpath",
		Short: "Inspect or remove the XDP fast path (reads the pinned maps; no agent needed)",
		Long: `The fastpath commands read the XDP fast path's maps where the agent pinned
them (--bpf-root), so they work while no agent runs. bpftool shows the same
maps with their BTF field names:
  bpftool map dump pinned /sys/fs/bpf/novaedge/` + fastpath.Layout + `/maps/fp_vips

  status      interfaces the program is attached to, mode (native/generic)
  vips        VIP entries: forwarding mode, packets and bytes
  backends    backends by ID, packets and bytes
  maglev      one VIP's Maglev table: each backend's share of the slots
  conntrack   tracked flows and the backend each one is pinned to
  stats       the program's counters: passes, drops by reason, conntrack hits
  uninstall   detach the program from every interface and remove the pins`,
		SilenceUsage: true,
	}
	cmd.PersistentFlags().StringVar(&fo.root, "bpf-root", fastpath.DefaultPinRoot, "where the agent pinned the fast path (the agent's --bpf-root)")
	cmd.AddCommand(
		fo.statusCmd(), fo.vipsCmd(), fo.backendsCmd(), fo.maglevCmd(), fo.conntrackCmd(), fo.statsCmd(), fo.uninstallCmd(),
	)
	return cmd
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// withPinned opens the pinned maps for one command.
func (fo *fastpathOptions) withPinned(f func(*fastpath.Pinned) error) error {
	p, err := fastpath.OpenPinned(fo.root)
	if err != nil {
		return &exitError{code: ExitFailure, err: err}
	}
	defer p.Close()
	return f(p)
}

func (fo *fastpathOptions) statusCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "interfaces running the fast path and the XDP mode in effect",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			atts, err := attach.List(fo.root)
			if err != nil {
				return &exitError{code: ExitFailure, err: err}
			}
			w := cmd.OutOrStdout()
			if fo.output == "json" {
				return writeJSON(w, atts)
			}
			if len(atts) == 0 {
				_, err := fmt.Fprintf(w, "the fast path is not attached anywhere (no links pinned under %s)\n", fo.root)
				return err
			}
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			_, _ = fmt.Fprintln(tw, "INTERFACE\tIFINDEX\tMODE\tPROGRAM\tLAYOUT\tPIN")
			for _, a := range atts {
				_, _ = fmt.Fprintf(tw, "%s\t%d\t%s\t%s (id %d)\t%s\t%s\n", a.Ifname, a.Ifindex, attachMode(a), a.ProgramName, a.ProgramID, a.LayoutVersion, a.Path)
			}
			return tw.Flush()
		},
	}
	outputFlag(cmd, &fo.output, "json lists the attachments", "table", "json")
	return cmd
}

func attachMode(a attach.Attachment) string {
	if !a.Attached {
		return "not attached: " + a.Problem
	}
	return a.Mode.String()
}

func (fo *fastpathOptions) vipsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "vips",
		Short: "VIP entries of the fast path with their forwarding mode and traffic",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return fo.withPinned(func(p *fastpath.Pinned) error {
				vips, err := p.VIPs()
				if err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				if fo.output == "json" {
					return writeJSON(w, vips)
				}
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				_, _ = fmt.Fprintln(tw, "ADDRESS\tPORT\tPROTO\tID\tFORWARD\tPACKETS\tBYTES")
				for _, v := range vips {
					port := strconv.Itoa(int(v.Port))
					if v.Port == 0 {
						port = "*"
					}
					fwd := v.Forward
					if v.Protocol == "addr" {
						fwd = "address (icmp echo)"
					}
					if v.GUEPort != 0 {
						fwd += fmt.Sprintf(" (udp %d)", v.GUEPort)
					}
					_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\n", v.Address, port, v.Protocol, v.ID, fwd, v.Packets, v.Bytes)
				}
				return tw.Flush()
			})
		},
	}
	outputFlag(cmd, &fo.output, "json lists the entries", "table", "json")
	return cmd
}

func (fo *fastpathOptions) backendsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "backends",
		Short: "backends of the fast path by ID with their traffic",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return fo.withPinned(func(p *fastpath.Pinned) error {
				bs, err := p.Backends()
				if err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				if fo.output == "json" {
					return writeJSON(w, bs)
				}
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				_, _ = fmt.Fprintln(tw, "ID\tBACKEND\tPACKETS\tBYTES")
				for _, b := range bs {
					_, _ = fmt.Fprintf(tw, "%d\t%s\t%d\t%d\n", b.ID, netip.AddrPortFrom(netip.MustParseAddr(b.Address), b.Port), b.Packets, b.Bytes)
				}
				return tw.Flush()
			})
		},
	}
	outputFlag(cmd, &fo.output, "json lists the backends", "table", "json")
	return cmd
}

// parseVIPArg parses ADDRESS:PORT[/tcp|udp] (or [v6]:PORT/...).
func parseVIPArg(s string) (netip.Addr, uint16, uint8, error) {
	proto := uint8(fastpath.ProtoTCP)
	if base, p, ok := strings.Cut(s, "/"); ok {
		switch strings.ToLower(p) {
		case "tcp":
		case "udp":
			proto = fastpath.ProtoUDP
		default:
			return netip.Addr{}, 0, 0, fmt.Errorf("%q: protocol %q must be tcp or udp", s, p)
		}
		s = base
	}
	if strings.HasSuffix(s, ":*") {
		a, err := netip.ParseAddr(strings.Trim(strings.TrimSuffix(s, ":*"), "[]"))
		return a, 0, proto, err
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return netip.Addr{}, 0, 0, fmt.Errorf("%q: want ADDRESS:PORT[/tcp|udp], e.g. 10.200.0.10:443/tcp or [2001:db8::1]:53/udp", s)
	}
	return ap.Addr(), ap.Port(), proto, nil
}

func (fo *fastpathOptions) maglevCmd() *cobra.Command {
	var full bool
	cmd := &cobra.Command{
		Use:   "maglev VIP:PORT[/tcp|udp]",
		Short: "one VIP entry's Maglev table: each backend's share of the slots",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError(fmt.Errorf("want one VIP entry, e.g. 10.200.0.10:443/tcp"))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			addr, port, proto, err := parseVIPArg(args[0])
			if err != nil {
				return usageError(err)
			}
			return fo.withPinned(func(p *fastpath.Pinned) error {
				info, err := p.Maglev(addr, port, proto, full)
				if err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				if fo.output == "json" {
					return writeJSON(w, info)
				}
				pr := &printer{w: w}
				pr.printf("VIP ID %d, %d slots, %d empty\n", info.VIPID, info.Size, info.Empty)
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				_, _ = fmt.Fprintln(tw, "BACKEND ID\tBACKEND\tSLOTS\tSHARE")
				for _, s := range info.Shares {
					_, _ = fmt.Fprintf(tw, "%d\t%s\t%d\t%.3f%%\n", s.BackendID, s.Backend, s.Slots, 100*s.Share)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				return pr.err
			})
		},
	}
	cmd.Flags().BoolVar(&full, "table", false, "with -o json, include the whole table (slot → backend ID)")
	outputFlag(cmd, &fo.output, "json has the shares, and with --table every slot", "table", "json")
	return cmd
}

func (fo *fastpathOptions) conntrackCmd() *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "conntrack",
		Short: "tracked flows and their backends",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return fo.withPinned(func(p *fastpath.Pinned) error {
				flows, total, err := p.Conntrack(limit)
				if err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				if fo.output == "json" {
					return writeJSON(w, map[string]any{"total": total, "flows": flows})
				}
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				_, _ = fmt.Fprintln(tw, "PROTO\tCLIENT\tVIP\tBACKEND ID\tSTATE\tNAT PORT\tIDLE")
				for _, f := range flows {
					nat := "-"
					if f.NATPort != 0 {
						nat = strconv.Itoa(int(f.NATPort))
					}
					_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", f.Protocol, f.Client, f.VIP, f.BackendID, f.State, nat, (time.Duration(f.IdleSeconds) * time.Second).Round(time.Second))
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				_, err = fmt.Fprintf(w, "%d tracked flows", total)
				if limit > 0 && total > limit {
					_, err = fmt.Fprintf(w, " (%d shown; --limit 0 shows all)", limit)
				}
				_, _ = fmt.Fprintln(w)
				return err
			})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 100, "show at most this many flows (0: all); the total is counted anyway")
	outputFlag(cmd, &fo.output, "json has the total and the flows", "table", "json")
	return cmd
}

func (fo *fastpathOptions) statsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "the program's counters, summed over CPUs",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return fo.withPinned(func(p *fastpath.Pinned) error {
				c, err := p.Counters()
				if err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				if fo.output == "json" {
					return writeJSON(w, c)
				}
				names := make([]string, 0, len(c))
				for n := range c {
					names = append(names, n)
				}
				slices.Sort(names)
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				_, _ = fmt.Fprintln(tw, "COUNTER\tPACKETS")
				for _, n := range names {
					_, _ = fmt.Fprintf(tw, "%s\t%d\n", n, c[n])
				}
				return tw.Flush()
			})
		},
	}
	outputFlag(cmd, &fo.output, "json maps counter names to values", "table", "json")
	return cmd
}

func (fo *fastpathOptions) uninstallCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "uninstall",
		Short: "detach the fast path from every interface and remove its pins (traffic then goes to the kernel)",
		Long: `uninstall detaches the XDP program from every interface it is pinned for and
removes the pinned programs, links and maps under --bpf-root. Stop the agent
first, or it attaches the fast path again when it next starts. An agent's
SIGTERM never detaches; this is the only way.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pins, err := datapath.Uninstall(fo.root)
			for _, p := range pins {
				_, _ = fmt.Fprintf(cmd.OutOrStdout(), "detached %s\n", p.Ifname)
			}
			if err != nil {
				return &exitError{code: ExitFailure, err: err}
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", fo.root)
			return err
		},
	}
}
