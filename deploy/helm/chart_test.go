package helm_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	yamlv3 "gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/novaedge/novaedge/test/kubeenv"
)

// helmVersion is the helm hack/install-deps.sh builds into bin/tools/.
const helmVersion = "v3.22.0"

// testNamespace is the release namespace of the render tests.
const testNamespace = "novaedge-test"

func TestMain(m *testing.M) { os.Exit(kubeenv.Run(m)) }

// repoRoot is the module root: the first directory upwards with a go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		if filepath.Dir(dir) == dir {
			t.Fatalf("no go.mod in %s or above", wd)
		}
	}
}

// chartDir is the chart under test.
func chartDir(t *testing.T) string {
	t.Helper()
	return filepath.Join(repoRoot(t), "deploy", "helm", "novaedge")
}

// helmBinary returns bin/tools/helm, failing the test with what to run when
// it is missing or another version.
func helmBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(repoRoot(t), "bin", "tools", "helm")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s is missing (%v): run hack/install-deps.sh (or make deps), which builds helm %s into bin/tools/", bin, err, helmVersion)
	}
	out, err := exec.Command(bin, "version", "--template", "{{.Version}}").Output()
	if err != nil || strings.TrimSpace(string(out)) != helmVersion {
		t.Fatalf("%s reports version %q (%v), want %s: run hack/install-deps.sh to rebuild it", bin, strings.TrimSpace(string(out)), err, helmVersion)
	}
	return bin
}

// runHelm runs helm with args in a private home (no cache, config or
// cluster of the machine's user), returning stdout and, on failure, an error
// holding stderr.
func runHelm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin := helmBinary(t)
	home := t.TempDir()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		"KUBECONFIG="+filepath.Join(home, "no-kubeconfig"),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	return stdout.String(), nil
}

// object is one rendered document.
type object struct {
	u   *unstructured.Unstructured
	raw []byte // the YAML document
}

// rendered is the output of helm template.
type rendered struct {
	namespace string
	objects   []object
}

// renderChart runs helm template with the --set values sets into namespace.
func renderChart(t *testing.T, namespace string, sets ...string) (*rendered, error) {
	t.Helper()
	args := []string{"template", "novaedge", chartDir(t), "--namespace", namespace}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	out, err := runHelm(t, args...)
	if err != nil {
		return nil, err
	}
	r := &rendered{namespace: namespace}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(out)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("split rendered YAML: %v", err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			t.Fatalf("rendered document is not YAML: %v\n%s", err, doc)
		}
		if len(m) == 0 {
			continue // only comments
		}
		r.objects = append(r.objects, object{u: &unstructured.Unstructured{Object: m}, raw: doc})
	}
	return r, nil
}

// mustRender renders and fails the test on an error.
func mustRender(t *testing.T, sets ...string) *rendered {
	t.Helper()
	r, err := renderChart(t, testNamespace, sets...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// find returns the rendered objects of a kind, by name.
func (r *rendered) find(kind string) map[string]object {
	out := map[string]object{}
	for _, o := range r.objects {
		if o.u.GetKind() == kind {
			out[o.u.GetName()] = o
		}
	}
	return out
}

// decode decodes the one object of kind and name into v, rejecting fields
// the Go type does not have (a misspelt field in a template fails here).
func (r *rendered) decode(t *testing.T, kind, name string, v any) {
	t.Helper()
	o, ok := r.find(kind)[name]
	if !ok {
		t.Fatalf("no %s %q rendered; have %v", kind, name, r.kinds())
	}
	if err := yaml.UnmarshalStrict(o.raw, v); err != nil {
		t.Fatalf("%s %s: %v", kind, name, err)
	}
}

// kinds lists "Kind/name" of every rendered object, sorted.
func (r *rendered) kinds() []string {
	var out []string
	for _, o := range r.objects {
		out = append(out, o.u.GetKind()+"/"+o.u.GetName())
	}
	sort.Strings(out)
	return out
}

func (r *rendered) daemonSet(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	var ds appsv1.DaemonSet
	r.decode(t, "DaemonSet", "novaedge-agent", &ds)
	return &ds
}

func (r *rendered) deployment(t *testing.T) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	r.decode(t, "Deployment", "novaedge-controller", &d)
	return &d
}

// container returns the named container or init container of spec.
func container(t *testing.T, spec *corev1.PodSpec, name string) *corev1.Container {
	t.Helper()
	for _, list := range [][]corev1.Container{spec.Containers, spec.InitContainers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	t.Fatalf("no container %q in the pod", name)
	return nil
}

// hasContainer says whether spec has a container or init container name.
func hasContainer(spec *corev1.PodSpec, name string) bool {
	for _, c := range append(slices.Clone(spec.Containers), spec.InitContainers...) {
		if c.Name == name {
			return true
		}
	}
	return false
}

// args parses --flag=value arguments into flag → values, failing on any
// other form (the chart always uses --flag=value).
func args(t *testing.T, c *corev1.Container) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, a := range c.Args {
		name, value, ok := strings.Cut(a, "=")
		if !ok || !strings.HasPrefix(name, "--") {
			t.Fatalf("container %s: argument %q is not --flag=value", c.Name, a)
		}
		out[strings.TrimPrefix(name, "--")] = append(out[strings.TrimPrefix(name, "--")], value)
	}
	return out
}

// arg returns the single value of flag, failing when it is not given once.
func arg(t *testing.T, c *corev1.Container, flag string) string {
	t.Helper()
	v := args(t, c)[flag]
	if len(v) != 1 {
		t.Fatalf("container %s: --%s given %d times (%v), want once; args %v", c.Name, flag, len(v), v, c.Args)
	}
	return v[0]
}

// volume returns the pod volume name.
func volume(t *testing.T, spec *corev1.PodSpec, name string) *corev1.Volume {
	t.Helper()
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			return &spec.Volumes[i]
		}
	}
	t.Fatalf("no volume %q in the pod", name)
	return nil
}

// mountAt returns the container's volume mount at path.
func mountAt(t *testing.T, c *corev1.Container, path string) *corev1.VolumeMount {
	t.Helper()
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].MountPath == path {
			return &c.VolumeMounts[i]
		}
	}
	t.Fatalf("container %s mounts nothing at %s; mounts %v", c.Name, path, c.VolumeMounts)
	return nil
}

// hostPathMount checks that c mounts the host's hostPath at mountPath
// (through a hostPath volume of type typ) and returns the mount.
func hostPathMount(t *testing.T, spec *corev1.PodSpec, c *corev1.Container, mountPath, hostPath string, typ corev1.HostPathType) *corev1.VolumeMount {
	t.Helper()
	m := mountAt(t, c, mountPath)
	v := volume(t, spec, m.Name)
	if v.HostPath == nil || v.HostPath.Path != hostPath || v.HostPath.Type == nil || *v.HostPath.Type != typ {
		t.Errorf("container %s: %s comes from volume %s = %+v, want hostPath %s of type %s", c.Name, mountPath, v.Name, v.VolumeSource, hostPath, typ)
	}
	return m
}

// portNumber resolves a probe's port (a number or a container port name).
func portNumber(t *testing.T, c *corev1.Container, p intstr.IntOrString) int32 {
	t.Helper()
	if p.Type == intstr.Int {
		return p.IntVal
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort
		}
	}
	t.Fatalf("container %s has no port named %q", c.Name, p.StrVal)
	return 0
}

// checkProbe checks that probe is an HTTP GET of path on port.
func checkProbe(t *testing.T, c *corev1.Container, what string, probe *corev1.Probe, path string, port int32) {
	t.Helper()
	if probe == nil || probe.HTTPGet == nil {
		t.Errorf("container %s: no HTTP %s probe", c.Name, what)
		return
	}
	if probe.HTTPGet.Path != path || portNumber(t, c, probe.HTTPGet.Port) != port {
		t.Errorf("container %s: %s probe GET %s on port %v, want %s on %d", c.Name, what, probe.HTTPGet.Path, probe.HTTPGet.Port.String(), path, port)
	}
}

// envFieldRef returns the fieldRef path of the container's env var name.
func envFieldRef(t *testing.T, c *corev1.Container, name string) string {
	t.Helper()
	for _, e := range c.Env {
		if e.Name == name {
			if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil {
				t.Fatalf("container %s: env %s is not from a fieldRef", c.Name, name)
			}
			return e.ValueFrom.FieldRef.FieldPath
		}
	}
	t.Fatalf("container %s: no env %s", c.Name, name)
	return ""
}

// envValue returns the literal value of the container's env var name.
func envValue(t *testing.T, c *corev1.Container, name string) string {
	t.Helper()
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	t.Fatalf("container %s: no env %s", c.Name, name)
	return ""
}

func TestLint(t *testing.T) {
	for _, tc := range []struct {
		name string
		sets []string
	}{
		{name: "defaults"},
		{name: "everything on", sets: []string{"agent.mountBPFFS=true", "metrics.serviceMonitor.enabled=true", "agent.interfaces={eth0}", "agent.fastpath=on"}},
		{name: "minimal", sets: []string{"agent.fastpath=off", "controller.replicas=1", "controller.leaderElect=false", "tls.create=false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"lint", "--strict", chartDir(t)}
			for _, s := range tc.sets {
				args = append(args, "--set", s)
			}
			out, err := runHelm(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, "1 chart(s) linted, 0 chart(s) failed") {
				t.Fatalf("helm lint --strict did not pass:\n%s", out)
			}
		})
	}
}

// TestChartMetadata checks Chart.yaml against the task's contract: the image
// tag defaults to appVersion, so one number names the release.
func TestChartMetadata(t *testing.T) {
	var chart struct {
		APIVersion string `json:"apiVersion"`
		Name       string `json:"name"`
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	b, err := os.ReadFile(filepath.Join(chartDir(t), "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &chart); err != nil {
		t.Fatal(err)
	}
	if chart.APIVersion != "v2" || chart.Name != "novaedge" || chart.Version != "0.1.0" || chart.AppVersion == "" {
		t.Errorf("Chart.yaml: %+v, want apiVersion v2, name novaedge, version 0.1.0 and an appVersion", chart)
	}
	r := mustRender(t)
	want := "ghcr.io/novaedge/novaedge:" + chart.AppVersion
	for _, spec := range []corev1.PodSpec{r.daemonSet(t).Spec.Template.Spec, r.deployment(t).Spec.Template.Spec} {
		for _, c := range append(slices.Clone(spec.Containers), spec.InitContainers...) {
			if c.Image != want {
				t.Errorf("container %s runs %s, want %s (image.tag defaults to appVersion)", c.Name, c.Image, want)
			}
		}
	}
}

// TestCRDsInSync checks that the chart ships exactly deploy/crds (make
// generate copies them).
func TestCRDsInSync(t *testing.T) {
	root := repoRoot(t)
	want, err := filepath.Glob(filepath.Join(root, "deploy", "crds", "*.yaml"))
	if err != nil || len(want) == 0 {
		t.Fatalf("no CRDs in deploy/crds (%v)", err)
	}
	have, err := filepath.Glob(filepath.Join(chartDir(t), "crds", "*"))
	if err != nil {
		t.Fatal(err)
	}
	base := func(paths []string) []string {
		var out []string
		for _, p := range paths {
			out = append(out, filepath.Base(p))
		}
		return out
	}
	if diff := cmp.Diff(base(want), base(have)); diff != "" {
		t.Fatalf("deploy/helm/novaedge/crds/ differs from deploy/crds/*.yaml (-want +have); run make generate:\n%s", diff)
	}
	for _, p := range want {
		a, _ := os.ReadFile(p)
		b, err := os.ReadFile(filepath.Join(chartDir(t), "crds", filepath.Base(p)))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("deploy/helm/novaedge/crds/%s differs from deploy/crds (%v); run make generate", filepath.Base(p), err)
		}
	}
}

// TestValuesDocumented checks that every setting in values.yaml has a
// comment and is in values.schema.json, and that the schema has no setting
// values.yaml leaves out.
func TestValuesDocumented(t *testing.T) {
	dir := chartDir(t)
	b, err := os.ReadFile(filepath.Join(dir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc yamlv3.Node
	if err := yamlv3.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	sb, err := os.ReadFile(filepath.Join(dir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := yaml.Unmarshal(sb, &schema); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	var walk func(path string, n *yamlv3.Node, s map[string]any)
	walk = func(path string, n *yamlv3.Node, s map[string]any) {
		props, _ := s["properties"].(map[string]any)
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := strings.TrimPrefix(path+"."+k.Value, ".")
			seen[k.Value] = true
			if strings.TrimSpace(k.HeadComment) == "" {
				t.Errorf("values.yaml: %s (line %d) has no comment above it", p, k.Line)
			}
			sub, ok := props[k.Value].(map[string]any)
			if !ok {
				t.Errorf("values.yaml: %s is not in values.schema.json", p)
				continue
			}
			if _, structured := sub["properties"]; structured && v.Kind == yamlv3.MappingNode {
				walk(p, v, sub)
			}
		}
		for name := range props {
			if !seen[name] && (path != "" || name != "global") {
				t.Errorf("values.schema.json: %s has no default in values.yaml", strings.TrimPrefix(path+"."+name, "."))
			}
		}
	}
	walk("", doc.Content[0], schema)
}

// TestRejectedValues checks that bad values fail the render with a message
// naming the value.
func TestRejectedValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  []string
		want string
	}{
		{"fast path maybe", []string{"agent.fastpath=maybe"}, "at '/agent/fastpath': value must be one of 'auto', 'on', 'off'"},
		{"xdp mode", []string{"agent.xdpMode=fast"}, "at '/agent/xdpMode': value must be one of 'auto', 'native', 'generic'"},
		{"misspelt setting", []string{"agent.fastPath=on"}, "additional properties 'fastPath' not allowed"},
		{"interface with a slash", []string{"agent.interfaces={eth/0}"}, "at '/agent/interfaces/0'"},
		{"interface name too long", []string{"agent.interfaces={abcdefghijklmnop}"}, "at '/agent/interfaces/0'"},
		{"port range not a range", []string{"agent.natPortRange=10000"}, "at '/agent/natPortRange'"},
		{"port range beyond 65535", []string{"agent.natPortRange=70000-80000"}, `agent.natPortRange "70000-80000": want LOW-HIGH with 1 <= LOW <= HIGH <= 65535`},
		{"port range reversed", []string{"agent.natPortRange=3000-2000"}, `agent.natPortRange "3000-2000": want LOW-HIGH`},
		{"port range from 0", []string{"agent.natPortRange=0-100"}, `agent.natPortRange "0-100": want LOW-HIGH`},
		{"metrics port 0", []string{"agent.metricsPort=0"}, "at '/agent/metricsPort'"},
		{"no controller", []string{"controller.replicas=0"}, "at '/controller/replicas'"},
		{"replicas without leader election", []string{"controller.leaderElect=false"}, "controller.leaderElect=false with controller.replicas=2"},
		{"own agent secret while the controller creates it", []string{"tls.agentSecretName=my-cert"}, `tls.agentSecretName "my-cert" with tls.create=true`},
		{"pull policy", []string{"image.pullPolicy=Sometimes"}, "at '/image/pullPolicy'"},
		{"log level", []string{"logLevel=verbose"}, "at '/logLevel'"},
		{"orphan timeout not a duration", []string{"bfd.orphanTimeout=soon"}, "at '/bfd/orphanTimeout'"},
		{"relative FRR directory", []string{"agent.frrVtyDir=run/frr"}, "at '/agent/frrVtyDir'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderChart(t, testNamespace, tc.set...)
			if err == nil {
				t.Fatalf("--set %v rendered; want it rejected with %q", tc.set, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("--set %v: error does not say %q:\n%v", tc.set, tc.want, err)
			}
		})
	}
}

// agentCapabilities are the only capabilities the agent holds; the
// template says why each is needed.
var agentCapabilities = []corev1.Capability{"BPF", "NET_ADMIN", "NET_BIND_SERVICE", "NET_RAW", "PERFMON"}

// checkAgent checks what must hold for the agent whatever the values.
func checkAgent(t *testing.T, r *rendered, ds *appsv1.DaemonSet, tlsSecret string) {
	t.Helper()
	spec := &ds.Spec.Template.Spec
	if !spec.HostNetwork {
		t.Error("agent: hostNetwork is false")
	}
	if spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("agent: dnsPolicy %q, want ClusterFirstWithHostNet (it resolves the controller's Service on the host network)", spec.DNSPolicy)
	}
	if spec.PriorityClassName != "system-node-critical" {
		t.Errorf("agent: priorityClassName %q", spec.PriorityClassName)
	}
	if diff := cmp.Diff([]corev1.Toleration{{Operator: corev1.TolerationOpExists}}, spec.Tolerations); diff != "" {
		t.Errorf("agent: tolerations (-want +have), want every node:\n%s", diff)
	}
	if spec.ServiceAccountName != "novaedge-agent" {
		t.Errorf("agent: serviceAccountName %q", spec.ServiceAccountName)
	}
	us := ds.Spec.UpdateStrategy
	if us.Type != appsv1.RollingUpdateDaemonSetStrategyType || us.RollingUpdate == nil || us.RollingUpdate.MaxUnavailable == nil || us.RollingUpdate.MaxUnavailable.String() != "1" {
		t.Errorf("agent: updateStrategy %+v, want RollingUpdate with maxUnavailable 1", us)
	}
	if sc := spec.SecurityContext; sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("agent: the pod has no RuntimeDefault seccomp profile")
	}

	agent := container(t, spec, "agent")
	sc := agent.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatal("agent: no securityContext.capabilities")
	}
	add := slices.Clone(sc.Capabilities.Add)
	slices.Sort(add)
	if diff := cmp.Diff(agentCapabilities, add); diff != "" {
		t.Errorf("agent: added capabilities (-want +have):\n%s", diff)
	}
	if diff := cmp.Diff([]corev1.Capability{"ALL"}, sc.Capabilities.Drop); diff != "" {
		t.Errorf("agent: dropped capabilities (-want +have):\n%s", diff)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("agent: allowPrivilegeEscalation is not false")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("agent: the root filesystem is writable")
	}

	// Every container but mount-bpffs is unprivileged.
	for _, c := range append(slices.Clone(spec.Containers), spec.InitContainers...) {
		privileged := c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged
		if privileged != (c.Name == "mount-bpffs") {
			t.Errorf("agent pod: container %s privileged=%v", c.Name, privileged)
		}
		if c.SecurityContext == nil || c.SecurityContext.Capabilities == nil {
			if c.Name != "mount-bpffs" {
				t.Errorf("agent pod: container %s keeps the runtime's default capabilities", c.Name)
			}
		}
	}

	// The host state the agent keeps, and where its flags point.
	bpf := hostPathMount(t, spec, agent, "/sys/fs/bpf", "/sys/fs/bpf", corev1.HostPathDirectory)
	if bpf.MountPropagation == nil || *bpf.MountPropagation != corev1.MountPropagationHostToContainer {
		t.Errorf("agent: /sys/fs/bpf propagation %v, want HostToContainer", bpf.MountPropagation)
	}
	hostPathMount(t, spec, agent, "/run/novaedge", "/run/novaedge", corev1.HostPathDirectoryOrCreate)
	hostPathMount(t, spec, agent, "/var/lib/novaedge", "/var/lib/novaedge", corev1.HostPathDirectoryOrCreate)
	if root := arg(t, agent, "bpf-root"); !strings.HasPrefix(root, "/sys/fs/bpf/") {
		t.Errorf("agent: --bpf-root=%s is not on the host's bpffs", root)
	}
	if dir := arg(t, agent, "state-dir"); dir != "/var/lib/novaedge" {
		t.Errorf("agent: --state-dir=%s is not the host directory", dir)
	}
	tlsMount := mountAt(t, agent, arg(t, agent, "controller-tls-dir"))
	if v := volume(t, spec, tlsMount.Name); v.Secret == nil || v.Secret.SecretName != tlsSecret || !tlsMount.ReadOnly {
		t.Errorf("agent: --controller-tls-dir is volume %+v (read-only %v), want the Secret %s read-only", v.VolumeSource, tlsMount.ReadOnly, tlsSecret)
	}
	if have, want := arg(t, agent, "controller"), "novaedge-controller."+r.namespace+".svc:9443"; have != want {
		t.Errorf("agent: --controller=%s, want %s", have, want)
	}
	if got := envFieldRef(t, agent, "NODE_NAME"); got != "spec.nodeName" {
		t.Errorf("agent: NODE_NAME from %s", got)
	}
	if got := envFieldRef(t, agent, "POD_NAMESPACE"); got != "metadata.namespace" {
		t.Errorf("agent: POD_NAMESPACE from %s", got)
	}
	addr := arg(t, agent, "metrics-addr")
	var port int32
	if _, err := fmt.Sscanf(addr, ":%d", &port); err != nil {
		t.Fatalf("agent: --metrics-addr=%s is not :PORT", addr)
	}
	checkProbe(t, agent, "liveness", agent.LivenessProbe, "/healthz", port)
	checkProbe(t, agent, "readiness", agent.ReadinessProbe, "/readyz", port)
	if agent.Resources.Limits.Memory().IsZero() || agent.Resources.Requests.Cpu().IsZero() {
		t.Errorf("agent: resources %+v, want the values' requests and limits", agent.Resources)
	}
	if !hasContainer(spec, "sysctls") && !hasContainer(spec, "mount-bpffs") {
		if _, ok := r.find("ConfigMap")["novaedge-agent-scripts"]; ok {
			t.Error("agent: the scripts ConfigMap is rendered without an init container to use it")
		}
	}
}

// checkScripts checks that the init containers run the chart's scripts.
func checkScripts(t *testing.T, r *rendered, spec *corev1.PodSpec) {
	t.Helper()
	var cm corev1.ConfigMap
	r.decode(t, "ConfigMap", "novaedge-agent-scripts", &cm)
	for _, name := range []string{"sysctls.sh", "mount-bpffs.sh"} {
		want, err := os.ReadFile(filepath.Join(chartDir(t), "files", name))
		if err != nil {
			t.Fatal(err)
		}
		if cm.Data[name] != string(want) {
			t.Errorf("ConfigMap novaedge-agent-scripts: %s differs from files/%s", name, name)
		}
	}
	if r.daemonSet(t).Spec.Template.Annotations["checksum/scripts"] == "" {
		t.Error("agent: no checksum/scripts annotation: changed scripts would not roll the agents")
	}
	for _, c := range spec.InitContainers {
		if len(c.Command) != 2 || c.Command[0] != "/bin/sh" || !strings.HasPrefix(c.Command[1], "/scripts/") {
			t.Errorf("init container %s: command %v, want /bin/sh /scripts/<script>", c.Name, c.Command)
			continue
		}
		if _, ok := cm.Data[strings.TrimPrefix(c.Command[1], "/scripts/")]; !ok {
			t.Errorf("init container %s runs %s, which the ConfigMap lacks", c.Name, c.Command[1])
		}
		m := mountAt(t, &c, "/scripts")
		if v := volume(t, spec, m.Name); v.ConfigMap == nil || v.ConfigMap.Name != "novaedge-agent-scripts" {
			t.Errorf("init container %s: /scripts is %+v", c.Name, v.VolumeSource)
		}
	}
}

// checkSysctls checks the unprivileged sysctl init container.
func checkSysctls(t *testing.T, spec *corev1.PodSpec, fastpath, interfaces, ports string) {
	t.Helper()
	c := container(t, spec, "sysctls")
	sc := c.SecurityContext
	if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 0 || sc.Capabilities == nil || len(sc.Capabilities.Add) != 0 ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("sysctls: securityContext %+v, want uid 0 with every capability dropped and no escalation", sc)
	}
	hostPathMount(t, spec, c, "/host/proc/sys/net", "/proc/sys/net", corev1.HostPathDirectory)
	for name, want := range map[string]string{"FASTPATH": fastpath, "INTERFACES": interfaces, "NAT_PORT_RANGE": ports} {
		if have := envValue(t, c, name); have != want {
			t.Errorf("sysctls: %s=%q, want %q", name, have, want)
		}
	}
}

// checkController checks what must hold for the controller whatever the
// values.
func checkController(t *testing.T, r *rendered, d *appsv1.Deployment) {
	t.Helper()
	spec := &d.Spec.Template.Spec
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("controller: pod securityContext %+v, want non-root with the RuntimeDefault seccomp profile", psc)
	}
	c := container(t, spec, "controller")
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil ||
		*sc.AllowPrivilegeEscalation || sc.Capabilities == nil || len(sc.Capabilities.Add) != 0 ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || (sc.Privileged != nil && *sc.Privileged) {
		t.Errorf("controller: securityContext %+v, want a read-only root filesystem, every capability dropped, no escalation", sc)
	}
	if spec.ServiceAccountName != "novaedge-controller" {
		t.Errorf("controller: serviceAccountName %q", spec.ServiceAccountName)
	}
	want := map[string][]string{
		"grpc-addr":    {":9443"},
		"metrics-addr": {":8080"},
		"health-addr":  {":8081"},
		"namespace":    {r.namespace},
	}
	have := args(t, c)
	for flag, v := range want {
		if !slices.Equal(have[flag], v) {
			t.Errorf("controller: --%s=%v, want %v", flag, have[flag], v)
		}
	}
	if got := envFieldRef(t, c, "POD_NAME"); got != "metadata.name" {
		t.Errorf("controller: POD_NAME from %s", got)
	}
	if got := envFieldRef(t, c, "POD_NAMESPACE"); got != "metadata.namespace" {
		t.Errorf("controller: POD_NAMESPACE from %s", got)
	}
	checkProbe(t, c, "liveness", c.LivenessProbe, "/healthz", 8081)
	checkProbe(t, c, "readiness", c.ReadinessProbe, "/readyz", 8081)
	spread := false
	for _, tsc := range spec.TopologySpreadConstraints {
		if tsc.TopologyKey == "kubernetes.io/hostname" && tsc.LabelSelector != nil && selects(tsc.LabelSelector.MatchLabels, d.Spec.Template.Labels) {
			spread = true
		}
	}
	if !spread {
		t.Errorf("controller: replicas are not spread across nodes: %+v", spec.TopologySpreadConstraints)
	}
	if !selects(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Error("controller: the Deployment's selector does not select its pods")
	}

	var svc corev1.Service
	r.decode(t, "Service", "novaedge-controller", &svc)
	if !selects(svc.Spec.Selector, d.Spec.Template.Labels) {
		t.Errorf("Service novaedge-controller selects %v, not the controller pods %v", svc.Spec.Selector, d.Spec.Template.Labels)
	}
	ports := map[string]int32{}
	for _, p := range svc.Spec.Ports {
		if portNumber(t, c, p.TargetPort) != p.Port {
			t.Errorf("Service port %s %d goes to container port %v", p.Name, p.Port, p.TargetPort.String())
		}
		ports[p.Name] = p.Port
	}
	if diff := cmp.Diff(map[string]int32{"grpc": 9443, "metrics": 8080}, ports); diff != "" {
		t.Errorf("Service novaedge-controller ports (-want +have):\n%s", diff)
	}
}

// selects says whether every label of selector is in labels.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func TestRender(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sets  []string
		check func(t *testing.T, r *rendered)
	}{
		{
			name: "defaults",
			check: func(t *testing.T, r *rendered) {
				ds := r.daemonSet(t)
				checkAgent(t, r, ds, "novaedge-agent-tls")
				spec := &ds.Spec.Template.Spec
				agent := container(t, spec, "agent")
				for flag, want := range map[string]string{"fastpath": "auto", "xdp-mode": "auto", "nat-port-range": "10000-32767", "metrics-addr": ":9090", "log-level": "info", "log-format": "text"} {
					if have := arg(t, agent, flag); have != want {
						t.Errorf("agent: --%s=%s, want %s", flag, have, want)
					}
				}
				if v := args(t, agent)["interface"]; len(v) != 0 {
					t.Errorf("agent: --interface %v by default, want none (the default route's)", v)
				}
				if hasContainer(spec, "mount-bpffs") {
					t.Error("agent: mount-bpffs runs by default")
				}
				checkSysctls(t, spec, "auto", "", "10000-32767")
				checkScripts(t, r, spec)

				d := r.deployment(t)
				checkController(t, r, d)
				if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
					t.Errorf("controller: replicas %v, want 2", d.Spec.Replicas)
				}
				c := container(t, &d.Spec.Template.Spec, "controller")
				if arg(t, c, "leader-elect") != "true" || arg(t, c, "default-lb-class") != "true" || arg(t, c, "maglev-lineage") != "true" {
					t.Errorf("controller: args %v, want --leader-elect=true --default-lb-class=true --maglev-lineage=true", c.Args)
				}
				var pdb policyv1.PodDisruptionBudget
				r.decode(t, "PodDisruptionBudget", "novaedge-controller", &pdb)
				if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.String() != "1" || pdb.Spec.Selector == nil || !selects(pdb.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
					t.Errorf("PodDisruptionBudget %+v, want minAvailable 1 over the controller pods", pdb.Spec)
				}
				if len(r.find("ServiceMonitor")) != 0 {
					t.Error("a ServiceMonitor is rendered by default")
				}
				wantKinds := []string{
					"ClusterRole/novaedge-controller", "ClusterRoleBinding/novaedge-controller",
					"ConfigMap/novaedge-agent-scripts", "DaemonSet/novaedge-agent", "DaemonSet/novaedge-bfd", "Deployment/novaedge-controller",
					"PodDisruptionBudget/novaedge-controller",
					"Role/novaedge-agent", "Role/novaedge-controller", "RoleBinding/novaedge-agent", "RoleBinding/novaedge-controller",
					"Service/novaedge-controller", "ServiceAccount/novaedge-agent", "ServiceAccount/novaedge-controller",
				}
				if diff := cmp.Diff(wantKinds, r.kinds()); diff != "" {
					t.Errorf("rendered objects (-want +have):\n%s", diff)
				}
				for _, o := range r.objects {
					ns := o.u.GetNamespace()
					clusterScoped := strings.HasPrefix(o.u.GetKind(), "Cluster")
					if clusterScoped != (ns == "") || (!clusterScoped && ns != testNamespace) {
						t.Errorf("%s %s: namespace %q, want %q", o.u.GetKind(), o.u.GetName(), ns, testNamespace)
					}
				}
			},
		},
		{
			name: "fast path off",
			sets: []string{"agent.fastpath=off"},
			check: func(t *testing.T, r *rendered) {
				ds := r.daemonSet(t)
				checkAgent(t, r, ds, "novaedge-agent-tls")
				spec := &ds.Spec.Template.Spec
				if arg(t, container(t, spec, "agent"), "fastpath") != "off" {
					t.Error("agent: --fastpath is not off")
				}
				if len(spec.InitContainers) != 0 {
					t.Errorf("agent: init containers %v without the fast path", spec.InitContainers)
				}
				for _, v := range spec.Volumes {
					if v.HostPath != nil && strings.HasPrefix(v.HostPath.Path, "/proc") {
						t.Errorf("agent: mounts the host's %s without the fast path", v.HostPath.Path)
					}
				}
				if len(r.find("ConfigMap")) != 0 {
					t.Error("the scripts ConfigMap is rendered without init containers")
				}
			},
		},
		{
			name: "interfaces and modes",
			sets: []string{"agent.fastpath=on", "agent.interfaces={eth0,bond0.100}", "agent.xdpMode=native", "agent.natPortRange=20000-30000", "agent.metricsPort=9190", "logLevel=debug", "logFormat=json"},
			check: func(t *testing.T, r *rendered) {
				ds := r.daemonSet(t)
				checkAgent(t, r, ds, "novaedge-agent-tls")
				spec := &ds.Spec.Template.Spec
				agent := container(t, spec, "agent")
				want := map[string][]string{
					"fastpath": {"on"}, "interface": {"eth0", "bond0.100"}, "xdp-mode": {"native"},
					"nat-port-range": {"20000-30000"}, "metrics-addr": {":9190"}, "log-level": {"debug"}, "log-format": {"json"},
				}
				have := args(t, agent)
				for flag, v := range want {
					if !slices.Equal(have[flag], v) {
						t.Errorf("agent: --%s=%v, want %v", flag, have[flag], v)
					}
				}
				checkSysctls(t, spec, "on", "eth0 bond0.100", "20000-30000")
				if len(agent.Ports) != 1 || agent.Ports[0].ContainerPort != 9190 {
					t.Errorf("agent: ports %+v, want 9190", agent.Ports)
				}
				c := container(t, &r.deployment(t).Spec.Template.Spec, "controller")
				if arg(t, c, "log-level") != "debug" || arg(t, c, "log-format") != "json" {
					t.Errorf("controller: args %v, want debug and json logs", c.Args)
				}
			},
		},
		{
			name: "mount bpffs",
			sets: []string{"agent.mountBPFFS=true"},
			check: func(t *testing.T, r *rendered) {
				ds := r.daemonSet(t)
				checkAgent(t, r, ds, "novaedge-agent-tls")
				spec := &ds.Spec.Template.Spec
				if len(spec.InitContainers) == 0 || spec.InitContainers[0].Name != "mount-bpffs" {
					t.Fatalf("agent: init containers %v, want mount-bpffs first", spec.InitContainers)
				}
				c := &spec.InitContainers[0]
				if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
					t.Error("mount-bpffs: not privileged, which Bidirectional propagation needs")
				}
				m := hostPathMount(t, spec, c, "/sys/fs/bpf", "/sys/fs/bpf", corev1.HostPathDirectory)
				if m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationBidirectional {
					t.Errorf("mount-bpffs: propagation %v, want Bidirectional (the mount must reach the host)", m.MountPropagation)
				}
				checkSysctls(t, spec, "auto", "", "10000-32767")
				checkScripts(t, r, spec)
			},
		},
		{
			name: "mount bpffs without the fast path's sysctls",
			sets: []string{"agent.mountBPFFS=true", "agent.sysctls=false"},
			check: func(t *testing.T, r *rendered) {
				ds := r.daemonSet(t)
				checkAgent(t, r, ds, "novaedge-agent-tls")
				spec := &ds.Spec.Template.Spec
				if len(spec.InitContainers) != 1 || spec.InitContainers[0].Name != "mount-bpffs" {
					t.Errorf("agent: init containers %v, want only mount-bpffs", spec.InitContainers)
				}
				checkScripts(t, r, spec)
			},
		},
		{
			name: "sysctls off",
			sets: []string{"agent.sysctls=false"},
			check: func(t *testing.T, r *rendered) {
				ds := r.daemonSet(t)
				checkAgent(t, r, ds, "novaedge-agent-tls")
				if n := len(ds.Spec.Template.Spec.InitContainers); n != 0 {
					t.Errorf("agent: %d init containers with agent.sysctls=false", n)
				}
			},
		},
		{
			name: "one controller without leader election",
			sets: []string{"controller.replicas=1", "controller.leaderElect=false", "controller.defaultLoadBalancerClass=false", "controller.maglevLineage=false"},
			check: func(t *testing.T, r *rendered) {
				d := r.deployment(t)
				checkController(t, r, d)
				if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
					t.Errorf("controller: replicas %v, want 1", d.Spec.Replicas)
				}
				c := container(t, &d.Spec.Template.Spec, "controller")
				if arg(t, c, "leader-elect") != "false" || arg(t, c, "default-lb-class") != "false" || arg(t, c, "maglev-lineage") != "false" {
					t.Errorf("controller: args %v", c.Args)
				}
				if len(r.find("PodDisruptionBudget")) != 0 {
					t.Error("a PodDisruptionBudget with one replica blocks every node drain")
				}
			},
		},
		{
			name: "bring your own certificates",
			sets: []string{"tls.create=false", "tls.agentSecretName=agent-cert"},
			check: func(t *testing.T, r *rendered) {
				checkAgent(t, r, r.daemonSet(t), "agent-cert")
			},
		},
		{
			name: "service monitor",
			sets: []string{"metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.labels.release=prom", "agent.metricsPort=9190"},
			check: func(t *testing.T, r *rendered) {
				sm, ok := r.find("ServiceMonitor")["novaedge"]
				if !ok {
					t.Fatalf("no ServiceMonitor; have %v", r.kinds())
				}
				if sm.u.GetLabels()["release"] != "prom" {
					t.Errorf("ServiceMonitor labels %v, want release=prom", sm.u.GetLabels())
				}
				sel, _, _ := unstructured.NestedStringMap(sm.u.Object, "spec", "selector", "matchLabels")
				var agentSvc, ctrlSvc corev1.Service
				r.decode(t, "Service", "novaedge-agent-metrics", &agentSvc)
				r.decode(t, "Service", "novaedge-controller", &ctrlSvc)
				for _, svc := range []corev1.Service{agentSvc, ctrlSvc} {
					if !selects(sel, svc.Labels) {
						t.Errorf("ServiceMonitor selector %v misses Service %s %v", sel, svc.Name, svc.Labels)
					}
					if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "metrics" }) {
						t.Errorf("Service %s has no metrics port", svc.Name)
					}
				}
				ds := r.daemonSet(t)
				if !selects(agentSvc.Spec.Selector, ds.Spec.Template.Labels) || agentSvc.Spec.Ports[0].Port != 9190 {
					t.Errorf("Service novaedge-agent-metrics %+v does not reach the agents' port 9190", agentSvc.Spec)
				}
			},
		},
		{
			name: "image",
			sets: []string{"image.repository=registry.example/novaedge", "image.tag=v9.9.9", "image.pullPolicy=Always", "imagePullSecrets[0].name=regcred"},
			check: func(t *testing.T, r *rendered) {
				for _, spec := range []corev1.PodSpec{r.daemonSet(t).Spec.Template.Spec, r.deployment(t).Spec.Template.Spec} {
					for _, c := range append(slices.Clone(spec.Containers), spec.InitContainers...) {
						if c.Image != "registry.example/novaedge:v9.9.9" || c.ImagePullPolicy != corev1.PullAlways {
							t.Errorf("container %s: image %s (%s)", c.Name, c.Image, c.ImagePullPolicy)
						}
					}
					if len(spec.ImagePullSecrets) != 1 || spec.ImagePullSecrets[0].Name != "regcred" {
						t.Errorf("imagePullSecrets %v", spec.ImagePullSecrets)
					}
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, mustRender(t, tc.sets...))
		})
	}
}

// flagRE matches the flag definitions of the commands' sources, e.g.
// fl.StringVar(&f.grpcAddr, "grpc-addr", ...).
var flagRE = regexp.MustCompile(`\.[A-Z][A-Za-z0-9]*VarP?\(\s*&[^,]+,\s*"([a-z][a-z0-9-]*)"`)

// commandFlags returns the flags defined in cmd/<name>/*.go (tests left out).
func commandFlags(t *testing.T, name string) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "cmd", name, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no sources of cmd/%s (%v)", name, err)
	}
	out := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range flagRE.FindAllStringSubmatch(string(b), -1) {
			out[m[1]] = true
		}
	}
	if len(out) < 3 {
		t.Fatalf("found only %d flags in cmd/%s: the pattern no longer matches how flags are defined", len(out), name)
	}
	return out
}

// TestFlagsExist checks every flag the chart passes against the flags the
// binaries define, so a renamed flag breaks this test rather than the pods.
func TestFlagsExist(t *testing.T) {
	// Every optional flag the chart can pass appears in one of these.
	renders := [][]string{nil, {"agent.interfaces={eth0}", "agent.frrVtyDir=/var/run/frr"}}
	for _, bin := range []struct {
		command, container string
		spec               func(t *testing.T, r *rendered) *corev1.PodSpec
	}{
		{"novaedge-agent", "agent", func(t *testing.T, r *rendered) *corev1.PodSpec { return &r.daemonSet(t).Spec.Template.Spec }},
		{"novaedge-controller", "controller", func(t *testing.T, r *rendered) *corev1.PodSpec { return &r.deployment(t).Spec.Template.Spec }},
		{"novaedge-bfdd", "bfd", func(t *testing.T, r *rendered) *corev1.PodSpec { return &r.bfdDaemonSet(t).Spec.Template.Spec }},
	} {
		t.Run(bin.command, func(t *testing.T) {
			defined := commandFlags(t, bin.command)
			used := map[string]bool{}
			for _, sets := range renders {
				c := container(t, bin.spec(t, mustRender(t, sets...)), bin.container)
				if !slices.Equal(c.Command, []string{bin.command}) {
					t.Errorf("container %s runs %v, want %s", c.Name, c.Command, bin.command)
				}
				for flag := range args(t, c) {
					used[flag] = true
				}
			}
			var missing []string
			for flag := range used {
				if !defined[flag] {
					missing = append(missing, "--"+flag)
				}
			}
			sort.Strings(missing)
			if len(missing) > 0 {
				t.Errorf("the chart passes %s flags that cmd/%s does not define: %s", bin.command, bin.command, strings.Join(missing, ", "))
			}
		})
	}
}

// rbacRules flattens rules into "group/resource[#names]" → sorted verbs.
func rbacRules(t *testing.T, rules []rbacv1.PolicyRule) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, r := range rules {
		if len(r.NonResourceURLs) > 0 {
			t.Errorf("rule %+v grants non-resource URLs", r)
		}
		for _, list := range [][]string{r.Verbs, r.APIGroups, r.Resources, r.ResourceNames} {
			if slices.ContainsFunc(list, func(s string) bool { return strings.Contains(s, "*") }) {
				t.Errorf("rule %+v has a wildcard", r)
			}
		}
		names := slices.Clone(r.ResourceNames)
		slices.Sort(names)
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				key := g + "/" + res
				if len(names) > 0 {
					key += "#" + strings.Join(names, ",")
				}
				verbs := append(out[key], r.Verbs...)
				slices.Sort(verbs)
				out[key] = slices.Compact(verbs)
			}
		}
	}
	return out
}

// crdPlurals returns the plural names of the CRDs in deploy/crds.
func crdPlurals(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "deploy", "crds", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in deploy/crds (%v)", err)
	}
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd struct {
			Spec struct {
				Group string `json:"group"`
				Names struct {
					Plural string `json:"plural"`
				} `json:"names"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(b, &crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if crd.Spec.Group != "novaedge.io" || crd.Spec.Names.Plural == "" {
			t.Fatalf("%s: group %q plural %q", f, crd.Spec.Group, crd.Spec.Names.Plural)
		}
		out = append(out, crd.Spec.Names.Plural)
	}
	return out
}

func TestRBAC(t *testing.T) {
	read := []string{"get", "list", "watch"}
	listWatch := []string{"list", "watch"}
	status := []string{"patch", "update"}
	clusterRole := map[string][]string{
		"/services": {"get", "list", "patch", "watch"}, "/services/status": status,
		"discovery.k8s.io/endpointslices": listWatch,
		"/secrets":                        listWatch,
		"/nodes":                          read,
		"/namespaces":                     listWatch,
		"networking.k8s.io/ingresses":     listWatch, "networking.k8s.io/ingressclasses": listWatch,
		"networking.k8s.io/ingresses/status":              status,
		"gateway.networking.k8s.io/gatewayclasses":        listWatch,
		"gateway.networking.k8s.io/gateways":              listWatch,
		"gateway.networking.k8s.io/httproutes":            listWatch,
		"gateway.networking.k8s.io/gatewayclasses/status": status,
		"gateway.networking.k8s.io/gateways/status":       status,
		"gateway.networking.k8s.io/httproutes/status":     status,
		"/events":              {"create", "patch"},
		"events.k8s.io/events": {"create", "patch"},
	}
	for _, p := range crdPlurals(t) {
		clusterRole["novaedge.io/"+p] = read
		clusterRole["novaedge.io/"+p+"/status"] = status
	}
	const mtls = "/secrets#novaedge-agent-tls,novaedge-ca,novaedge-controller-tls"
	leases := []string{"create", "get", "list", "patch", "update", "watch"}

	// The Maglev lineage ConfigMaps the leader writes (controller/lineage.go).
	lineageCMs := []string{"create", "delete", "get", "list", "update", "watch"}
	for _, tc := range []struct {
		name           string
		sets           []string
		controllerRole map[string][]string
	}{
		{
			name:           "controller creates the certificates",
			controllerRole: map[string][]string{"coordination.k8s.io/leases": leases, mtls: {"get", "update"}, "/secrets": {"create"}, "/configmaps": lineageCMs},
		},
		{
			name:           "certificates provided",
			sets:           []string{"tls.create=false"},
			controllerRole: map[string][]string{"coordination.k8s.io/leases": leases, mtls: {"get"}, "/configmaps": lineageCMs},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustRender(t, tc.sets...)
			var cr rbacv1.ClusterRole
			r.decode(t, "ClusterRole", "novaedge-controller", &cr)
			if diff := cmp.Diff(clusterRole, rbacRules(t, cr.Rules)); diff != "" {
				t.Errorf("ClusterRole novaedge-controller (-want +have):\n%s", diff)
			}
			var role rbacv1.Role
			r.decode(t, "Role", "novaedge-controller", &role)
			if diff := cmp.Diff(tc.controllerRole, rbacRules(t, role.Rules)); diff != "" {
				t.Errorf("Role novaedge-controller (-want +have):\n%s", diff)
			}
			var agentRole rbacv1.Role
			r.decode(t, "Role", "novaedge-agent", &agentRole)
			if diff := cmp.Diff(map[string][]string{"coordination.k8s.io/leases": {"create", "get", "update"}}, rbacRules(t, agentRole.Rules)); diff != "" {
				t.Errorf("Role novaedge-agent (-want +have):\n%s", diff)
			}

			// Bindings: each role to its own ServiceAccount in the release
			// namespace; nothing cluster-wide for the agent.
			for _, b := range []struct{ kind, name, roleKind string }{
				{"ClusterRoleBinding", "novaedge-controller", "ClusterRole"},
				{"RoleBinding", "novaedge-controller", "Role"},
				{"RoleBinding", "novaedge-agent", "Role"},
			} {
				var rb rbacv1.RoleBinding // the same shape as a ClusterRoleBinding
				r.decode(t, b.kind, b.name, &rb)
				want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: b.name, Namespace: testNamespace}}
				if rb.RoleRef.Kind != b.roleKind || rb.RoleRef.Name != b.name || !cmp.Equal(want, rb.Subjects) {
					t.Errorf("%s %s: roleRef %+v subjects %+v", b.kind, b.name, rb.RoleRef, rb.Subjects)
				}
			}
			if n := len(r.find("ClusterRoleBinding")); n != 1 {
				t.Errorf("%d ClusterRoleBindings, want only the controller's", n)
			}
		})
	}
}
