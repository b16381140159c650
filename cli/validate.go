package cli

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/novaedge/novaedge/diag"
	"github.com/novaedge/novaedge/loader"
	"github.com/novaedge/novaedge/snapshot"
)

func newValidateCommand(o *options) *cobra.Command {
	var (
		node   string
		output string
		plan   bool
	)
	cmd := &cobra.Command{
		Use:   "validate PATH...",
		Short: "Check configuration files offline, as the agent would load them",
		Long: `validate reads the YAML files (a directory contributes its *.yaml and *.yml
files) and checks them the way a standalone agent loads them:

  1. every NovaEdge resource against the CRDs a kube-apiserver would apply
     (unknown fields, types and ranges, CEL rules), core and Gateway API
     objects by strict decoding;
  2. the snapshot build for one node (--node): references between resources,
     address and port conflicts, IP pools, the fast/slow path plan.

Every problem is printed on one line, sorted by file and line:

  file:line: error: Kind namespace/name: field: message

followed by a summary "N errors, M warnings". A Secret or Service that the
files reference but do not contain is a warning, not an error: it may exist
in the cluster the files are meant for.

Exit status: 0 when there is no error (warnings allowed), 1 when there is.`,
		Example: `  novaedgectl validate deploy/examples/standalone.yaml
  novaedgectl validate -o json config/
  novaedgectl validate --plan --node edge-1 config/`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError(fmt.Errorf("validate needs at least one file or directory"))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runValidate(cmd.OutOrStdout(), args, node, output, plan)
		},
	}
	cmd.Flags().StringVar(&node, "node", "validate", "node name the snapshot is built for (matters only for VIPs with a nodeSelector, which are matched against no labels)")
	cmd.Flags().BoolVar(&plan, "plan", false, "also print the fast/slow path plan the files produce (text output only; JSON always includes it)")
	outputFlag(cmd, &output, "json prints {diagnostics, errors, warnings, plan}", "text", "json")
	return cmd
}

// validateReport is the JSON form of validate's output.
type validateReport struct {
	Diagnostics []jsonDiagnostic `json:"diagnostics"`
	Errors      int              `json:"errors"`
	Warnings    int              `json:"warnings"`
	Plan        []planRow        `json:"plan"`
}

// jsonDiagnostic is a diag.Diagnostic with the severity spelled out.
type jsonDiagnostic struct {
	Severity string        `json:"severity"`
	Resource diag.Ref      `json:"resource"`
	Field    string        `json:"field,omitempty"`
	Message  string        `json:"message"`
	Position diag.Position `json:"position"`
	Text     string        `json:"text"`
}

func toJSONDiagnostics(l diag.List) []jsonDiagnostic {
	out := make([]jsonDiagnostic, 0, len(l))
	for _, d := range l {
		out = append(out, jsonDiagnostic{
			Severity: d.Severity.String(),
			Resource: d.Resource,
			Field:    d.Field,
			Message:  d.Message,
			Position: d.Pos,
			Text:     d.String(),
		})
	}
	return out
}

// Validate loads paths and builds the snapshot for node as a standalone
// agent would, returning every diagnostic with its position, sorted, and
// the plan of the build.
func Validate(node string, paths ...string) (diag.List, []planRow) {
	res, diags := loader.Load(paths...)
	snap, built := snapshot.Build(res.Input, snapshot.Options{
		Node:            snapshot.Node{Name: node},
		ClusterComplete: false,
	})
	res.Locate(built)
	diags = append(diags, built...)
	diags.Sort()
	return diags, planRows(snap.GetCluster().GetPlan())
}

func runValidate(w io.Writer, paths []string, node, output string, showPlan bool) error {
	diags, plan := Validate(node, paths...)
	nerr, nwarn := len(diags.Errors()), len(diags.Warnings())
	switch output {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if plan == nil {
			plan = []planRow{}
		}
		if err := enc.Encode(validateReport{Diagnostics: toJSONDiagnostics(diags), Errors: nerr, Warnings: nwarn, Plan: plan}); err != nil {
			return err
		}
	default:
		p := &printer{w: w}
		for _, d := range diags {
			p.println(d.String())
		}
		if showPlan {
			if len(diags) > 0 {
				p.println()
			}
			if p.err == nil {
				p.err = writePlanTable(w, plan)
			}
			p.println()
		}
		p.printf("%s, %s\n", plural(nerr, "error"), plural(nwarn, "warning"))
		if p.err != nil {
			return p.err
		}
	}
	if nerr > 0 {
		return &exitError{code: ExitFailure}
	}
	return nil
}
