package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// vipCall asks the agent for its VIP status and prints it with table, or
// as JSON (the part pick selects).
func (o *options) vipCall(cmd *cobra.Command, output string, pick func(*pb.VIPStatusResponse) proto.Message, table func(io.Writer, *pb.VIPStatusResponse, time.Time) error) error {
	return o.agentCall(cmd.Context(), func(ctx context.Context, c pb.AgentAdminClient) error {
		st, err := c.VIPStatus(ctx, &pb.VIPStatusRequest{})
		if err != nil {
			return err
		}
		if output == "json" {
			return writeProto(cmd.OutOrStdout(), pick(st), "json")
		}
		if !st.GetEnabled() {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), "VIP announcement is not running in this agent")
			return err
		}
		return table(cmd.OutOrStdout(), st, time.Now())
	})
}

func newVIPCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "vip",
		Short: "Inspect the VIP announcements of the agent's node",
	}
	var output string
	status := &cobra.Command{
		Use:   "status",
		Short: "Show per VIP its mode, role, interfaces and whether it is announced",
		Long: `vip status lists the VIPs the agent announces in modes L2ARP, BGP and OSPF:
their role on this node (ACTIVE or STANDBY for L2ARP, ANNOUNCE for BGP and
OSPF), addresses, interfaces, whether the node announces them now and why
not; then the L2 counters (gratuitous ARPs, neighbour advertisements,
answers), the L2 lease, the BGP speaker and BFD summaries, and the problems
of the last apply. Local VIPs are in "novaedgectl status" (bound addresses).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.vipCall(cmd, output, func(st *pb.VIPStatusResponse) proto.Message { return st }, writeVIPStatus)
		},
	}
	outputFlag(status, &output, "json is the VIPStatusResponse message as protojson", "table", "json")
	cmd.AddCommand(status)
	return cmd
}

func newBGPCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bgp",
		Short: "Inspect the agent's BGP speaker: peers and announced routes",
	}
	var peersOut, routesOut string
	peers := &cobra.Command{
		Use:   "peers",
		Short: "Show the BGP sessions: state, uptime, prefixes, last error",
		Long: `bgp peers lists the configured BGP peers with their session state, how long
they have been Established, the prefixes advertised to and received from
them, whether BFD (or an operator) shut them down, and the last error.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.vipCall(cmd, peersOut, func(st *pb.VIPStatusResponse) proto.Message { return bgpOrEmpty(st) }, writeBGPPeers)
		},
	}
	outputFlag(peers, &peersOut, "json is the BGPStatus message as protojson", "table", "json")
	routes := &cobra.Command{
		Use:   "routes",
		Short: "Show the host routes the BGP speaker announces",
		Long: `bgp routes lists the VIP host routes (/32, /128) the node announces, with
their communities, local preference (sent to iBGP peers only) and MED. A BGP
VIP without a healthy backend is withdrawn and missing here; "novaedgectl vip
status" says why.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.vipCall(cmd, routesOut, func(st *pb.VIPStatusResponse) proto.Message { return bgpOrEmpty(st) }, writeBGPRoutes)
		},
	}
	outputFlag(routes, &routesOut, "json is the BGPStatus message as protojson", "table", "json")
	cmd.AddCommand(peers, routes)
	return cmd
}

func newBFDCommand(o *options) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "bfd",
		Short: "Show the BFD sessions with the BGP peers",
		Long: `bfd lists the BFD sessions the agent runs with the BGP peers of VIPs that
enable BFD: local and peer state, diagnostic, transmit interval, detection
time and counters. A session that fails shuts its BGP peer down until it is
Up again. The agent does not run BFD where another speaker (FRR's bfdd)
holds UDP port 3784; the error says so.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.vipCall(cmd, output, func(st *pb.VIPStatusResponse) proto.Message {
				if st.GetBfd() == nil {
					return &pb.BFDStatus{}
				}
				return st.GetBfd()
			}, writeBFD)
		},
	}
	outputFlag(cmd, &output, "json is the BFDStatus message as protojson", "table", "json")
	return cmd
}

func newOSPFCommand(o *options) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "ospf",
		Short: "Show OSPF as the agent drives it in FRR: neighbours, routes, problems",
		Long: `ospf shows the OSPF state of the node's FRR (ospfd, configured by the agent
through vtysh for OSPF VIPs): the neighbours with their adjacency state, the
VIP host routes in this node's router LSA with their area and cost, and the
problems that keep a VIP from being advertised — an authentication, area or
hello/dead interval mismatch seen in the neighbours' packets, a VIP missing
from the router LSA, an uplink without a Full adjacency. BFD for OSPF VIPs
is FRR's bfdd ("vtysh -c 'show bfd peers'"), not the agent's.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.vipCall(cmd, output, func(st *pb.VIPStatusResponse) proto.Message {
				if st.GetOspf() == nil {
					return &pb.OSPFStatus{}
				}
				return st.GetOspf()
			}, writeOSPF)
		},
	}
	outputFlag(cmd, &output, "json is the OSPFStatus message as protojson", "table", "json")
	return cmd
}

func bgpOrEmpty(st *pb.VIPStatusResponse) *pb.BGPStatus {
	if st.GetBgp() == nil {
		return &pb.BGPStatus{}
	}
	return st.GetBgp()
}

// dash stands in for an empty cell.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// since formats how long ago a Unix-millisecond time was.
func since(ms int64, now time.Time) string {
	if ms == 0 {
		return "-"
	}
	return now.Sub(time.UnixMilli(ms)).Round(time.Second).String()
}

func writeVIPStatus(w io.Writer, st *pb.VIPStatusResponse, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	p := &printer{w: tw}
	if len(st.GetVips()) == 0 {
		p.println("No VIPs in modes L2ARP, BGP or OSPF on this node.")
	} else {
		p.println("VIP\tMODE\tROLE\tADDRESSES\tINTERFACES\tANNOUNCED\tBFD\tREASON")
		for _, v := range st.GetVips() {
			p.printf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.GetVip(), v.GetMode(), v.GetRole(),
				strings.Join(v.GetAddresses(), ","), dash(strings.Join(v.GetInterfaces(), ",")),
				yesNo(v.GetAnnounced()), yesNo(v.GetBfd()), dash(v.GetReason()))
		}
	}
	if p.err != nil {
		return p.err
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	p = &printer{w: w}
	l := st.GetL2()
	lease := "never renewed"
	if ms := st.GetL2LeaseUntilUnixMs(); ms != 0 {
		if d := time.UnixMilli(ms).Sub(now); d > 0 {
			lease = fmt.Sprintf("fresh for %s", d.Round(time.Millisecond))
		} else {
			lease = fmt.Sprintf("EXPIRED %s ago", (-d).Round(time.Millisecond))
		}
	}
	p.printf("\nL2: lease %s; %d gratuitous ARPs, %d unsolicited NAs, %d ARP replies, %d solicited NAs, %d suppressed, %d conflicts\n",
		lease, l.GetGarps(), l.GetUnsolicitedNas(), l.GetArpReplies(), l.GetSolicitedNas(), l.GetSuppressed(), l.GetConflicts())
	b := st.GetBgp()
	switch {
	case b.GetRunning():
		est := 0
		for _, pe := range b.GetPeers() {
			if pe.GetState() == "Established" {
				est++
			}
		}
		restart := ""
		if b.GetRestarting() {
			restart = ", started after a restart (graceful restart)"
		}
		p.printf("BGP: AS %d, router ID %s%s; %d of %s established, %s announced\n", b.GetLocalAs(), dash(b.GetRouterId()), restart,
			est, plural(len(b.GetPeers()), "peer"), plural(len(b.GetRoutes()), "route"))
	default:
		p.println("BGP: not running")
	}
	if b.GetError() != "" {
		p.printf("BGP error: %s\n", b.GetError())
	}
	f := st.GetBfd()
	switch {
	case !f.GetRunning() && f.GetError() != "":
		p.printf("BFD: not running: %s\n", f.GetError())
	case f.GetRunning():
		up := 0
		for _, s := range f.GetSessions() {
			if s.GetState() == "Up" {
				up++
			}
		}
		p.printf("BFD: %d of %s up (%s)\n", up, plural(len(f.GetSessions()), "session"), dash(f.GetSpeaker()))
		if f.GetProblem() != "" {
			p.printf("BFD problem: %s\n", f.GetProblem())
		}
		if f.GetError() != "" {
			p.printf("BFD error: %s\n", f.GetError())
		}
	default:
		p.println("BFD: not running")
	}
	ospf := st.GetOspf()
	switch {
	case ospf.GetRunning():
		full := 0
		for _, n := range ospf.GetNeighbors() {
			if n.GetState() == "Full" {
				full++
			}
		}
		p.printf("OSPF: router ID %s; %d of %s Full, %s advertised\n", dash(ospf.GetRouterId()), full,
			plural(len(ospf.GetNeighbors()), "neighbour"), plural(len(ospf.GetRoutes()), "route"))
		for _, pr := range ospf.GetProblems() {
			p.printf("OSPF problem: %s\n", pr)
		}
	default:
		p.println("OSPF: not running")
	}
	if ospf.GetError() != "" {
		p.printf("OSPF error: %s\n", ospf.GetError())
	}
	if len(st.GetErrors()) > 0 {
		p.println("\nProblems:")
		for _, e := range st.GetErrors() {
			p.printf("  %s\n", e)
		}
	}
	return p.err
}

func writeBGPPeers(w io.Writer, st *pb.VIPStatusResponse, now time.Time) error {
	b := st.GetBgp()
	if !b.GetRunning() {
		_, err := fmt.Fprintln(w, "BGP is not running: no BGP VIP on this node")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	p := &printer{w: tw}
	p.println("PEER\tAS\tSTATE\tUP\tSENT\tRECEIVED\tSHUT DOWN\tLAST ERROR")
	for _, pe := range b.GetPeers() {
		up := "-"
		if pe.GetState() == "Established" {
			up = since(pe.GetEstablishedSinceUnixMs(), now)
		}
		lastErr := "-"
		if pe.GetLastError() != "" {
			lastErr = fmt.Sprintf("%s (%s ago)", pe.GetLastError(), since(pe.GetLastErrorAtUnixMs(), now))
		}
		p.printf("%s\t%d\t%s\t%s\t%d\t%d\t%s\t%s\n", hostPort(pe.GetAddress(), pe.GetPort()), pe.GetAs(), pe.GetState(), up,
			pe.GetAdvertised(), pe.GetReceived(), dash(pe.GetShutDown()), lastErr)
	}
	if p.err != nil {
		return p.err
	}
	return tw.Flush()
}

func writeBGPRoutes(w io.Writer, st *pb.VIPStatusResponse, _ time.Time) error {
	b := st.GetBgp()
	if !b.GetRunning() {
		_, err := fmt.Fprintln(w, "BGP is not running: no BGP VIP on this node")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	p := &printer{w: tw}
	p.println("PREFIX\tVIP\tCOMMUNITIES\tLOCAL-PREF\tMED")
	for _, r := range b.GetRoutes() {
		comms := strings.Join(append(append([]string{}, r.GetCommunities()...), r.GetLargeCommunities()...), " ")
		lp, med := "-", "-"
		if r.GetHasLocalPreference() {
			lp = fmt.Sprint(r.GetLocalPreference())
		}
		if r.GetHasMed() {
			med = fmt.Sprint(r.GetMed())
		}
		p.printf("%s\t%s\t%s\t%s\t%s\n", r.GetPrefix(), r.GetVip(), dash(comms), lp, med)
	}
	if p.err != nil {
		return p.err
	}
	return tw.Flush()
}

func writeBFD(w io.Writer, st *pb.VIPStatusResponse, now time.Time) error {
	f := st.GetBfd()
	if !f.GetRunning() && f.GetError() != "" {
		_, err := fmt.Fprintf(w, "BFD is not running: %s\n", f.GetError())
		return err
	}
	if !f.GetRunning() {
		_, err := fmt.Fprintln(w, "BFD is not running: no BGP VIP on this node enables it")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if _, err := fmt.Fprintf(w, "Speaker: %s\n", dash(f.GetSpeaker())); err != nil {
		return err
	}
	for _, l := range []struct{ label, text string }{{"Problem", f.GetProblem()}, {"Error", f.GetError()}} {
		if l.text == "" {
			continue
		}
		if _, err := fmt.Fprintf(w, "%s: %s\n", l.label, l.text); err != nil {
			return err
		}
	}
	p := &printer{w: tw}
	p.println("PEER\tLOCAL\tSTATE\tREMOTE\tDIAG\tTX\tDETECT\tSINCE\tUPS\tDOWNS\tC")
	for _, s := range f.GetSessions() {
		local := s.GetLocal()
		if s.GetInterface() != "" {
			local += "%" + s.GetInterface()
		}
		p.printf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", s.GetPeer(), local, s.GetState(), s.GetRemoteState(), s.GetDiag(),
			time.Duration(s.GetTxIntervalMs())*time.Millisecond, time.Duration(s.GetDetectionTimeMs())*time.Millisecond,
			since(s.GetLastChangeUnixMs(), now), s.GetUps(), s.GetDowns(), yesNo(s.GetControlPlaneIndependent()))
	}
	if p.err != nil {
		return p.err
	}
	return tw.Flush()
}

func writeOSPF(w io.Writer, st *pb.VIPStatusResponse, now time.Time) error {
	o := st.GetOspf()
	if !o.GetRunning() {
		msg := "OSPF is not running: no OSPF VIP on this node"
		if o.GetError() != "" {
			msg = "OSPF is not running: " + o.GetError()
		}
		_, err := fmt.Fprintln(w, msg)
		return err
	}
	p := &printer{w: w}
	last := "never"
	if o.GetLastReconcileUnixMs() != 0 {
		last = since(o.GetLastReconcileUnixMs(), now) + " ago"
	}
	p.printf("Router ID %s; last reconcile %s; %d lines re-applied\n\n", dash(o.GetRouterId()), last, o.GetReapplied())
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	tp := &printer{w: tw}
	if len(o.GetNeighbors()) == 0 {
		tp.println("No OSPF neighbours.")
	} else {
		tp.println("NEIGHBOUR\tADDRESS\tINTERFACE\tSTATE\tROLE\tDEAD IN")
		for _, n := range o.GetNeighbors() {
			tp.printf("%s\t%s\t%s\t%s\t%s\t%s\n", dash(n.GetRouterId()), dash(n.GetAddress()), dash(n.GetInterface()), n.GetState(),
				dash(n.GetRole()), time.Duration(n.GetDeadTimeMs())*time.Millisecond)
		}
	}
	tp.println()
	if len(o.GetRoutes()) == 0 {
		tp.println("No VIP routes advertised.")
	} else {
		tp.println("PREFIX\tVIP\tAREA\tCOST")
		for _, r := range o.GetRoutes() {
			tp.printf("%s\t%s\t%s\t%d\n", r.GetPrefix(), r.GetVip(), r.GetArea(), r.GetCost())
		}
	}
	if tp.err != nil {
		return tp.err
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if o.GetError() != "" {
		p.printf("\nError: %s\n", o.GetError())
	}
	if len(o.GetProblems()) > 0 {
		p.println("\nProblems:")
		for _, pr := range o.GetProblems() {
			p.printf("  %s\n", pr)
		}
	}
	return p.err
}
