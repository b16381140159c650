package kubeenv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/novaedge/novaedge/api/v1alpha1"
	"github.com/novaedge/novaedge/test/kubeenv/internal/stopsig"
)

// Env is a running kube-apiserver with clients for it.
type Env struct {
	// Config reaches the API server as a cluster administrator.
	Config *rest.Config
	// Client is a controller-runtime client using Scheme.
	Client client.Client
	// Clientset is a client-go clientset for the same server.
	Clientset kubernetes.Interface
	// Scheme holds client-go's kinds, the NovaEdge v1alpha1 kinds and the
	// Gateway API v1 kinds.
	Scheme *runtime.Scheme
	// Kubeconfig is the path of a kubeconfig file for the same server and
	// user, for CLI tools and binaries started by tests (--kubeconfig).
	Kubeconfig string
}

const (
	// startTimeout bounds the start of each process and the CRD installation.
	// It is generous because the machines that run the tests are shared and
	// an apiserver start competes with parallel compiles.
	startTimeout = 3 * time.Minute
	stopTimeout  = time.Minute

	assetsScript = "hack/envtest-assets.sh"
	tempPrefix   = "kubeenv-"
	ownerFile    = "owner.pid"
	gatewayAPI   = "sigs.k8s.io/gateway-api"
)

var (
	currentMu sync.Mutex
	current   *Env
)

// Run starts the control plane, runs the tests of m and stops the control
// plane again, also when m.Run panics or the binary gets SIGINT, SIGTERM or
// SIGHUP. It returns the exit code for os.Exit: 1 when the control plane
// cannot start or stop cleanly, else m.Run's.
func Run(m *testing.M) (code int) {
	env, stop, err := Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubeenv: %v\n", err)
		return 1
	}
	defer func() {
		if err := stop(); err != nil {
			fmt.Fprintf(os.Stderr, "kubeenv: stop the control plane: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}()

	currentMu.Lock()
	current = env
	currentMu.Unlock()
	defer func() {
		currentMu.Lock()
		current = nil
		currentMu.Unlock()
	}()
	return m.Run()
}

// Start starts a control plane as Run does, for programs that are not
// test binaries (the benchmarks of perf/). It returns the environment and
// stop, which stops the control plane and removes its files; the caller
// must call it when done (calling it again is harmless). Until then
// SIGINT, SIGTERM and SIGHUP stop the control plane before they end the
// process, and the processes die with the calling process in any case.
func Start() (env *Env, stop func() error, err error) {
	cp, err := start()
	if err != nil {
		return nil, nil, err
	}
	go cp.stopOnSignal()
	return cp.env, cp.stop, nil
}

// Get returns the environment Run started. It fails t when the test binary's
// TestMain did not call Run.
func Get(t testing.TB) *Env {
	t.Helper()
	currentMu.Lock()
	defer currentMu.Unlock()
	if current == nil {
		t.Fatal("kubeenv: no Kubernetes API running: the package's TestMain must call kubeenv.Run, " +
			"e.g. func TestMain(m *testing.M) { os.Exit(kubeenv.Run(m)) }")
	}
	return current
}

// Namespace creates a namespace named prefix plus a random suffix and returns
// its name. Names are never reused: envtest has no namespace controller, so a
// deleted namespace stays Terminating forever; the namespace is left in place.
func (e *Env) Namespace(t testing.TB, prefix string) string {
	t.Helper()
	if errs := validation.IsDNS1123Label(prefix + "-xxxxx"); len(errs) > 0 {
		t.Fatalf("kubeenv: namespace prefix %q: %s", prefix, strings.Join(errs, "; "))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := e.Client.Create(ctx, ns); err != nil {
		t.Fatalf("kubeenv: create namespace with prefix %q: %v", prefix, err)
	}
	return ns.Name
}

// controlPlane owns one envtest environment and the files around it.
type controlPlane struct {
	env *Env
	te  *envtest.Environment
	dir string // everything on disk: data, certificates, wrappers, kubeconfig

	stopReq  chan struct{}
	stopDone chan error
	stopOnce sync.Once
	stopErr  error
	signals  chan os.Signal
}

// start brings up etcd and kube-apiserver, installs the CRDs and returns when
// every CRD is established.
func start() (_ *controlPlane, err error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	assets, err := assetsDir(root)
	if err != nil {
		return nil, err
	}
	gatewayCRDs, err := gatewayCRDDir(root)
	if err != nil {
		return nil, err
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		return nil, fmt.Errorf("find setpriv (util-linux), used so that the control plane dies with the test binary: %w", err)
	}
	scheme, err := newScheme()
	if err != nil {
		return nil, err
	}

	sweepStale()
	dir, err := os.MkdirTemp("", tempPrefix)
	if err != nil {
		return nil, fmt.Errorf("create a temporary directory: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	// Every file of the control plane lives under dir, marked with this
	// process's id, so that a later run can remove what a killed binary left.
	etcdData, certDir, binDir := filepath.Join(dir, "etcd"), filepath.Join(dir, "apiserver"), filepath.Join(dir, "bin")
	for _, d := range []string{etcdData, certDir, binDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, fmt.Errorf("create %s: %w", d, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		return nil, fmt.Errorf("write owner file: %w", err)
	}
	etcdPath, err := writeWrapper(binDir, setpriv, filepath.Join(assets, "etcd"))
	if err != nil {
		return nil, err
	}
	apiserverPath, err := writeWrapper(binDir, setpriv, filepath.Join(assets, "kube-apiserver"))
	if err != nil {
		return nil, err
	}

	// The processes' output is kept (its tail) so that a failed start says
	// why instead of only "timeout waiting for process".
	out := &tailBuffer{max: 32 << 10}
	var sink io.Writer = out
	if os.Getenv("KUBEBUILDER_ATTACH_CONTROL_PLANE_OUTPUT") == "true" {
		sink = io.MultiWriter(out, os.Stderr)
	}
	useExisting := false
	te := &envtest.Environment{
		Scheme:                   scheme,
		CRDDirectoryPaths:        []string{filepath.Join(root, "deploy", "crds"), gatewayCRDs},
		ErrorIfCRDPathMissing:    true,
		UseExistingCluster:       &useExisting,
		ControlPlaneStartTimeout: startTimeout,
		ControlPlaneStopTimeout:  stopTimeout,
	}
	te.CRDInstallOptions.MaxTime = startTimeout
	te.ControlPlane.Etcd = &envtest.Etcd{Path: etcdPath, DataDir: etcdData, Out: sink, Err: sink}
	apiserver := te.ControlPlane.GetAPIServer()
	apiserver.Path = apiserverPath
	apiserver.CertDir = certDir
	apiserver.Out = sink
	apiserver.Err = sink
	// Every Service of type LoadBalancer takes a ClusterIP, and envtest's
	// default range is a /24: too few for the thousand Services of
	// perf/controlplane.
	apiserver.Configure().Set("service-cluster-ip-range", "10.0.0.0/16")

	cp := &controlPlane{
		te:       te,
		dir:      dir,
		stopReq:  make(chan struct{}),
		stopDone: make(chan error, 1),
		signals:  make(chan os.Signal, 1),
	}
	started := make(chan error, 1)
	go cp.own(started)
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start the control plane (binaries from %s) and install the CRDs: %w\n--- control plane output (tail) ---\n%s", assets, err, out.String())
	}
	// From here on a failure must stop the running processes.
	defer func() {
		if err != nil {
			_ = cp.stop()
		}
	}()

	cfg := te.Config
	if err := waitEstablished(cfg, te.CRDs); err != nil {
		return nil, err
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("create controller-runtime client: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create clientset: %w", err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, te.KubeConfig, 0o600); err != nil {
		return nil, fmt.Errorf("write kubeconfig: %w", err)
	}
	cp.env = &Env{Config: cfg, Client: cl, Clientset: cs, Scheme: scheme, Kubeconfig: kubeconfig}
	signal.Notify(cp.signals, stopsig.Signals...)
	return cp, nil
}

// own starts the control plane and, later, stops it, all on one locked OS
// thread. The processes carry a parent-death signal (see writeWrapper), and
// Linux sends it when the thread that forked them ends, not the process: an
// ordinary goroutine could fork from a thread the Go runtime later retires.
// The thread stays locked for good, so it ends when this goroutine does,
// after Stop; if Stop left a process behind, the signal then kills it.
func (cp *controlPlane) own(started chan<- error) {
	goruntime.LockOSThread()
	if _, err := cp.te.Start(); err != nil {
		if stopErr := cp.te.Stop(); stopErr != nil {
			err = errors.Join(err, fmt.Errorf("stop after failed start: %w", stopErr))
		}
		started <- err
		close(cp.stopDone)
		return
	}
	started <- nil
	<-cp.stopReq
	cp.stopDone <- cp.te.Stop()
}

// stop stops the processes and removes the temporary files; it is safe to
// call more than once and from several goroutines.
func (cp *controlPlane) stop() error {
	cp.stopOnce.Do(func() {
		signal.Stop(cp.signals)
		close(cp.stopReq)
		cp.stopErr = <-cp.stopDone
		if err := os.RemoveAll(cp.dir); err != nil {
			cp.stopErr = errors.Join(cp.stopErr, fmt.Errorf("remove %s: %w", cp.dir, err))
		}
	})
	return cp.stopErr
}

// stopOnSignal stops the control plane on SIGINT, SIGTERM or SIGHUP and then
// lets the signal end the process as it would have without the handler.
func (cp *controlPlane) stopOnSignal() {
	var sig os.Signal
	select {
	case sig = <-cp.signals:
	case <-cp.stopReq:
		return
	}
	fmt.Fprintf(os.Stderr, "kubeenv: %v: stopping the control plane\n", sig)
	if err := cp.stop(); err != nil {
		fmt.Fprintf(os.Stderr, "kubeenv: stop the control plane: %v\n", err)
	}
	signal.Reset(sig)
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		_ = p.Signal(sig)
		// The default action ends the process; this is only reached if the
		// signal is somehow ignored.
		time.Sleep(10 * time.Second)
	}
	os.Exit(1)
}

// sweepStale removes the temporary directories of earlier test binaries
// that died without cleaning up (their processes died with them; see own).
// A directory whose owner still runs, or that has no owner file yet, stays.
func sweepStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(string(b))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); errors.Is(err, fs.ErrNotExist) {
			_ = os.RemoveAll(dir)
		}
	}
}

// writeWrapper writes an executable script that runs bin through setpriv
// with SIGKILL as its parent-death signal, and returns the script's path.
// envtest offers no hook into the processes it starts, but it runs whatever
// path it is given with its own arguments.
func writeWrapper(dir, setpriv, bin string) (string, error) {
	if st, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("%s: %w (run `make envtest`, or unset KUBEBUILDER_ASSETS to let kubeenv build it)", bin, err)
	} else if st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s is not executable", bin)
	}
	script := fmt.Sprintf("#!/bin/sh\n# Written by kubeenv: %s dies with the test binary.\nexec %s --pdeathsig KILL -- %s \"$@\"\n",
		filepath.Base(bin), shellQuote(setpriv), shellQuote(bin))
	path := filepath.Join(dir, filepath.Base(bin))
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		return "", fmt.Errorf("write wrapper for %s: %w", bin, err)
	}
	return path, nil
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// moduleRoot walks up from the working directory (a test binary runs in its
// package's directory) to the directory holding go.mod.
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("get working directory: %w", err)
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod in %s or any parent: kubeenv finds deploy/crds and %s from the module root", wd, assetsScript)
		}
		dir = parent
	}
}

// assetsDir returns KUBEBUILDER_ASSETS or, when it is unset, the directory
// hack/envtest-assets.sh prints (building the binaries on first use).
func assetsDir(root string) (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	script := filepath.Join(root, assetsScript)
	fmt.Fprintf(os.Stderr, "kubeenv: KUBEBUILDER_ASSETS is unset; running %s (the first run builds kube-apiserver and etcd, which takes minutes)\n", assetsScript)
	cmd := exec.Command(script)
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("run %s to get kube-apiserver and etcd: %w", script, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" || strings.Contains(dir, "\n") {
		return "", fmt.Errorf("%s printed %q, want one directory", script, out)
	}
	return dir, nil
}

// gatewayCRDDir returns the Gateway API standard CRDs of the gateway-api
// version go.mod selects, from the module cache. (Test binaries carry no
// module versions in their build info, so the go command is asked.)
func gatewayCRDDir(root string) (string, error) {
	// Without a version, go mod download takes the one go.mod selects,
	// prints where it is (fetching it through the module proxy if the cache
	// lost it), and leaves go.mod alone.
	cmd := exec.Command("go", "mod", "download", "-json", gatewayAPI)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locate %s in the module cache: %w: %s", gatewayAPI, err, stderr.Bytes())
	}
	var mod struct{ Version, Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return "", fmt.Errorf("parse go mod download output for %s: %w", gatewayAPI, err)
	}
	if mod.Error != "" {
		return "", fmt.Errorf("download %s: %s", gatewayAPI, mod.Error)
	}
	dir := filepath.Join(mod.Dir, "config", "crd", "standard")
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("gateway API standard CRDs: the %s@%s module ships no config/crd/standard: %w", gatewayAPI, mod.Version, err)
	}
	return dir, nil
}

func newScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for name, add := range map[string]func(*runtime.Scheme) error{
		"client-go":         clientgoscheme.AddToScheme,
		"novaedge v1alpha1": v1alpha1.AddToScheme,
		"gateway API v1":    gatewayv1.Install,
	} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("add %s kinds to the scheme: %w", name, err)
		}
	}
	return s, nil
}

// waitEstablished waits until every installed CRD reports Established and
// NamesAccepted. envtest already waits until discovery serves them; this
// also covers the conditions clients of the CRD API look at.
func waitEstablished(cfg *rest.Config, crds []*apiextensionsv1.CustomResourceDefinition) error {
	s := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		return fmt.Errorf("add apiextensions kinds to a scheme: %w", err)
	}
	cl, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return fmt.Errorf("create client for CRDs: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for _, want := range crds {
		for {
			var crd apiextensionsv1.CustomResourceDefinition
			err := cl.Get(ctx, client.ObjectKey{Name: want.Name}, &crd)
			if err == nil && crdCondition(&crd, apiextensionsv1.Established) && crdCondition(&crd, apiextensionsv1.NamesAccepted) {
				break
			}
			select {
			case <-ctx.Done():
				if err == nil {
					err = errors.New("not Established and NamesAccepted")
				}
				return fmt.Errorf("CRD %s: %w (%w)", want.Name, err, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

func crdCondition(crd *apiextensionsv1.CustomResourceDefinition, t apiextensionsv1.CustomResourceDefinitionConditionType) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == t {
			return c.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
