package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/novaedge/novaedge/diag"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/snapshot"
)

// agentCall dials the agent's admin socket, runs fn with a deadline and
// closes the connection. Errors say what to check.
func (o *options) agentCall(ctx context.Context, fn func(context.Context, pb.AgentAdminClient) error) error {
	path := o.socket
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("agent admin socket %s: %w (is novaedge-agent running? set --socket to its --admin-socket)", path, err)
	}
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connect to agent at %s: %w", path, err)
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if err := fn(ctx, pb.NewAgentAdminClient(conn)); err != nil {
		if s, ok := status.FromError(err); ok {
			switch s.Code() {
			case codes.Unavailable:
				return fmt.Errorf("agent at %s is not answering: %s (is novaedge-agent running?)", path, s.Message())
			case codes.DeadlineExceeded:
				return fmt.Errorf("agent at %s did not answer within %s", path, o.timeout)
			case codes.PermissionDenied:
				return fmt.Errorf("agent at %s: %s (the socket is for root; try sudo)", path, s.Message())
			}
			return fmt.Errorf("agent at %s: %s: %s", path, s.Code(), s.Message())
		}
		return fmt.Errorf("agent at %s: %w", path, err)
	}
	return nil
}

var protoJSON = protojson.MarshalOptions{UseProtoNames: true}

// writeProto prints m as protojson, or as YAML converted from it. The JSON
// is re-indented with encoding/json, because protojson varies its
// whitespace on purpose and scripts diff this output.
func writeProto(w io.Writer, m proto.Message, format string) error {
	raw, err := protoJSON.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode %s: %w", m.ProtoReflect().Descriptor().Name(), err)
	}
	if format == "yaml" {
		out, err := yaml.JSONToYAML(raw)
		if err != nil {
			return fmt.Errorf("convert to YAML: %w", err)
		}
		_, err = w.Write(out)
		return err
	}
	var compact, out bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return fmt.Errorf("reformat JSON: %w", err)
	}
	if err := json.Indent(&out, compact.Bytes(), "", "  "); err != nil {
		return fmt.Errorf("reformat JSON: %w", err)
	}
	out.WriteByte('\n')
	_, err = w.Write(out.Bytes())
	return err
}

func newStatusCommand(o *options) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show what the agent serves and whether it is ready",
		Long: `status asks the agent (over --socket) what it serves: the configuration source,
the applied snapshot version, counts of VIPs, listeners, routes and backends,
how many plan entries run on the fast and slow path, the Local VIP addresses it
bound, the last rejected configuration, and the kernel features it probed at
start.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.agentCall(cmd.Context(), func(ctx context.Context, c pb.AgentAdminClient) error {
				st, err := c.Status(ctx, &pb.StatusRequest{})
				if err != nil {
					return err
				}
				if output == "json" {
					return writeProto(cmd.OutOrStdout(), st, output)
				}
				return writeStatus(cmd.OutOrStdout(), st, time.Now())
			})
		},
	}
	outputFlag(cmd, &output, "json is the AgentStatus message as protojson", "table", "json")
	return cmd
}

// when formats a Unix-millisecond time with its age.
func when(ms int64, now time.Time) string {
	if ms == 0 {
		return "never"
	}
	t := time.UnixMilli(ms)
	return fmt.Sprintf("%s (%s ago)", t.Format(time.RFC3339), now.Sub(t).Round(time.Second))
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func writeStatus(w io.Writer, st *pb.AgentStatus, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	source := st.GetSource()
	switch {
	case len(st.GetConfigPaths()) > 0:
		source += " (" + strings.Join(st.GetConfigPaths(), ", ") + ")"
	case st.GetControllerAddress() != "":
		source += " (" + st.GetControllerAddress() + ")"
	}
	hash := st.GetAppliedContentHash()
	if len(hash) > 12 {
		hash = hash[:12]
	}
	lastErr := "none"
	if st.GetLastError() != "" {
		lastErr = fmt.Sprintf("%s: %s", when(st.GetLastErrorAtUnixMs(), now), st.GetLastError())
	}
	bound := strings.Join(st.GetBoundAddresses(), ", ")
	if bound == "" {
		bound = "none"
	}
	rows := [][2]string{
		{"Node", st.GetNodeName()},
		{"Agent", fmt.Sprintf("%s, started %s", st.GetAgentVersion(), when(st.GetStartedAtUnixMs(), now))},
		{"Source", source},
		{"Ready", yesNo(st.GetReady())},
		{"Applied", fmt.Sprintf("version %d (hash %s) at %s", st.GetAppliedVersion(), hash, when(st.GetAppliedAtUnixMs(), now))},
		{"Serving", fmt.Sprintf("%s, %s, %s, %s", plural(int(st.GetVips()), "VIP"), plural(int(st.GetListeners()), "listener"), plural(int(st.GetRoutes()), "route"), plural(int(st.GetBackends()), "backend"))},
		{"Plan", fmt.Sprintf("%d fast path, %d slow path", st.GetFastPathEntries(), st.GetSlowPathEntries())},
		{"Warnings", fmt.Sprintf("%d (see novaedgectl errors)", st.GetWarnings())},
		{"Bound addresses", bound},
		{"Last rejected", lastErr},
	}
	p := &printer{w: tw}
	for _, r := range rows {
		p.printf("%s:\t%s\n", r[0], r[1])
	}
	if p.err != nil {
		return p.err
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(st.GetFeatures()) == 0 {
		return nil
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	p = &printer{w: tw}
	p.println("\nKernel features:")
	for _, f := range st.GetFeatures() {
		avail := "available"
		if !f.GetAvailable() {
			avail = "MISSING"
		}
		p.printf("  %s\t%s\t%s\n", f.GetName(), avail, f.GetDetail())
	}
	if p.err != nil {
		return p.err
	}
	return tw.Flush()
}

func newSnapshotCommand(o *options) *cobra.Command {
	var (
		output string
		slots  bool
	)
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Print the ConfigSnapshot the agent serves",
		Long: `snapshot prints the ConfigSnapshot the agent is serving (cluster part: VIPs,
listeners, routes, backends, policies, certificates and the plan; node part:
the VIPs this node serves), as protojson with the proto field names, or as
YAML converted from it. Certificate private keys are included as the agent
holds them: treat the output as secret. The slots of Maglev lineages (8 to
130 KB per entry) are left out unless --lineage-slots is given.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.agentCall(cmd.Context(), func(ctx context.Context, c pb.AgentAdminClient) error {
				s, err := c.GetSnapshot(ctx, &pb.GetSnapshotRequest{})
				if err != nil {
					return err
				}
				if !slots {
					for _, e := range s.GetCluster().GetPlan() {
						if e.GetLineage() != nil {
							e.Lineage.Slots = nil
						}
					}
				}
				return writeProto(cmd.OutOrStdout(), s, output)
			})
		},
	}
	outputFlag(cmd, &output, "both show the same fields", "json", "yaml")
	cmd.Flags().BoolVar(&slots, "lineage-slots", false, "include the slots of Maglev lineages (PlanEntry.lineage.slots), which are left out by default")
	return cmd
}

func newPlanCommand(o *options) *cobra.Command {
	var (
		output    string
		endpoints bool
	)
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Show, per VIP address:port, whether XDP or the Go proxy serves it, and why",
		Long: `plan prints the agent's data-path plan: one line per VIP address:port/protocol
that a listener binds, FAST when the XDP fast path balances its flows in the
kernel (a TCP or UDP listener with one route that has only backendRefs, or TLS
passthrough with one route and no hostnames), SLOW when packets go to the Go
proxy (HTTP routing, TLS termination, SNI routing, policies), with the reasons.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.agentCall(cmd.Context(), func(ctx context.Context, c pb.AgentAdminClient) error {
				s, err := c.GetSnapshot(ctx, &pb.GetSnapshotRequest{})
				if err != nil {
					return err
				}
				rows := planRows(s.GetCluster().GetPlan())
				w := cmd.OutOrStdout()
				if output == "json" {
					enc := json.NewEncoder(w)
					enc.SetIndent("", "  ")
					return enc.Encode(rows)
				}
				if err := writePlanTable(w, rows); err != nil {
					return err
				}
				if endpoints {
					return writePlanEndpoints(w, rows)
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&endpoints, "endpoints", false, "also list the weighted endpoints of each FAST entry (the input of its Maglev table)")
	outputFlag(cmd, &output, "json lists the entries with their endpoints", "table", "json")
	return cmd
}

func writePlanEndpoints(w io.Writer, rows []planRow) error {
	p := &printer{w: w}
	for _, r := range rows {
		if len(r.Endpoints) == 0 {
			continue
		}
		p.printf("\n%s/%s endpoints:\n", hostPort(r.Address, r.Port), r.Protocol)
		for _, e := range r.Endpoints {
			p.printf("  %s\n", e)
		}
	}
	return p.err
}

func newErrorsCommand(o *options) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "errors",
		Short: "Show the diagnostics of the served and of the last rejected configuration",
		Long: `errors prints, one per line, the diagnostics of the configuration the agent
serves (warnings, and errors of resources it left out while serving the rest)
and, if the last configuration it read was rejected as a whole, why. The
agent keeps serving the last good configuration after a rejection.

Exit status: 0 when the served configuration has no errors and nothing was
rejected, 1 otherwise.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var failed bool
			err := o.agentCall(cmd.Context(), func(ctx context.Context, c pb.AgentAdminClient) error {
				r, err := c.ConfigErrors(ctx, &pb.ConfigErrorsRequest{})
				if err != nil {
					return err
				}
				applied, rejected := fromProto(r.GetApplied()), fromProto(r.GetRejected())
				failed = applied.HasErrors() || len(rejected) > 0 || r.GetRejectedError() != ""
				if output == "json" {
					return writeProto(cmd.OutOrStdout(), r, "json")
				}
				return writeErrors(cmd.OutOrStdout(), applied, rejected, r.GetRejectedError())
			})
			if err == nil && failed {
				return &exitError{code: ExitFailure}
			}
			return err
		},
	}
	outputFlag(cmd, &output, "json is the ConfigErrorsResponse message as protojson", "table", "json")
	return cmd
}

func fromProto(ps []*pb.Diagnostic) diag.List {
	var l diag.List
	for _, p := range ps {
		l = append(l, snapshot.DiagnosticFromProto(p))
	}
	l.Sort()
	return l
}

func writeErrors(w io.Writer, applied, rejected diag.List, rejectedErr string) error {
	p := &printer{w: w}
	p.printf("Served configuration: %s, %s\n", plural(len(applied.Errors()), "error"), plural(len(applied.Warnings()), "warning"))
	for _, d := range applied {
		p.printf("  %s\n", d)
	}
	if len(rejected) == 0 && rejectedErr == "" {
		p.println("Last rejected configuration: none")
		return p.err
	}
	p.println("Last rejected configuration (the served one above was kept):")
	if rejectedErr != "" {
		p.printf("  %s\n", rejectedErr)
	}
	for _, d := range rejected {
		p.printf("  %s\n", d)
	}
	return p.err
}

func newReloadCommand(o *options) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "reload",
		Short: "Make a standalone agent re-read its configuration files now",
		Long: `reload asks a standalone agent to re-read its configuration files, build and
apply the new snapshot. A configuration with errors is rejected and the agent
keeps serving the last good one; "novaedgectl errors" shows why.

Exit status: 0 when the new configuration was applied, 1 when it was rejected
or the agent could not be asked.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var rejected error
			err := o.agentCall(cmd.Context(), func(ctx context.Context, c pb.AgentAdminClient) error {
				r, err := c.Reload(ctx, &pb.ReloadRequest{})
				if err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				if output == "json" {
					if err := writeProto(w, r, "json"); err != nil {
						return err
					}
				} else if r.GetApplied() {
					if _, err := fmt.Fprintf(w, "applied version %d\n", r.GetVersion()); err != nil {
						return err
					}
				}
				if !r.GetApplied() {
					msg := r.GetError()
					if msg == "" {
						msg = "the agent did not apply the configuration"
					}
					rejected = errors.New("reload rejected, still serving the last good configuration: " + msg)
				}
				return nil
			})
			if err != nil {
				return err
			}
			if rejected != nil {
				return &exitError{code: ExitFailure, err: rejected}
			}
			return nil
		},
	}
	outputFlag(cmd, &output, "json is the ReloadResponse message as protojson", "table", "json")
	return cmd
}
