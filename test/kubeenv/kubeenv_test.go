package kubeenv

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/novaedge/novaedge/api/v1alpha1"
)

// childEnv makes the test binary, started by TestControlPlaneDiesWithBinary,
// hold a control plane until its stdin closes instead of running tests.
const childEnv = "KUBEENV_TEST_HOLD_CONTROL_PLANE"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		holdControlPlane()
	}
	os.Exit(Run(m))
}

// holdControlPlane starts a control plane, reports "ready", and exits when
// stdin closes, deliberately without stopping it: the processes must still
// go away with this binary.
func holdControlPlane() {
	cp, err := start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("ready", cp.dir)
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	os.Exit(0)
}

func testCtx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

func TestProxyIPPoolAndVIPRoundTrip(t *testing.T) {
	env := Get(t)
	c := testCtx(t)

	pool := &v1alpha1.ProxyIPPool{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "pool-"},
		Spec:       v1alpha1.ProxyIPPoolSpec{CIDRs: []string{"10.200.0.0/24"}, Addresses: []string{"10.201.0.5-10.201.0.9"}},
	}
	if err := env.Client.Create(c, pool); err != nil {
		t.Fatalf("create ProxyIPPool: %v", err)
	}
	vip := &v1alpha1.ProxyVIP{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "vip-"},
		Spec: v1alpha1.ProxyVIPSpec{
			Mode:    v1alpha1.VIPModeL2ARP,
			PoolRef: &v1alpha1.LocalObjectRef{Name: pool.Name},
			Ports:   []v1alpha1.PortNumber{80, 443},
		},
	}
	if err := env.Client.Create(c, vip); err != nil {
		t.Fatalf("create ProxyVIP: %v", err)
	}

	var gotPool v1alpha1.ProxyIPPool
	if err := env.Client.Get(c, client.ObjectKeyFromObject(pool), &gotPool); err != nil {
		t.Fatalf("get ProxyIPPool: %v", err)
	}
	if got := gotPool.Spec.CIDRs; len(got) != 1 || got[0] != "10.200.0.0/24" {
		t.Errorf("ProxyIPPool spec.cidrs = %v, want [10.200.0.0/24]", got)
	}
	var gotVIP v1alpha1.ProxyVIP
	if err := env.Client.Get(c, client.ObjectKeyFromObject(vip), &gotVIP); err != nil {
		t.Fatalf("get ProxyVIP: %v", err)
	}
	if gotVIP.Spec.PoolRef == nil || gotVIP.Spec.PoolRef.Name != pool.Name || len(gotVIP.Spec.Ports) != 2 {
		t.Errorf("ProxyVIP spec = %+v, want poolRef %s and 2 ports", gotVIP.Spec, pool.Name)
	}

	// Status goes through the status subresource only: a status change in a
	// plain update is dropped, one through Status().Update is kept.
	gotVIP.Status.Address = "10.200.0.1"
	if err := env.Client.Update(c, &gotVIP); err != nil {
		t.Fatalf("update ProxyVIP: %v", err)
	}
	if gotVIP.Status.Address != "" {
		t.Errorf("plain update kept status.address %q; the status subresource is not enabled", gotVIP.Status.Address)
	}
	gotVIP.Status = v1alpha1.ProxyVIPStatus{
		Address:            "10.200.0.1",
		ActiveNode:         "node-a",
		ObservedGeneration: gotVIP.Generation,
		Conditions: []metav1.Condition{{
			Type: "Ready", Status: metav1.ConditionTrue, Reason: "Announced", Message: "announced by node-a",
			LastTransitionTime: metav1.NewTime(time.Unix(1700000000, 0)),
		}},
	}
	if err := env.Client.Status().Update(c, &gotVIP); err != nil {
		t.Fatalf("update ProxyVIP status: %v", err)
	}
	gotPool.Status = v1alpha1.ProxyIPPoolStatus{
		Allocations: []v1alpha1.PoolAllocation{{Address: "10.200.0.1", Owner: "ProxyVIP/" + vip.Name}},
		Allocated:   1,
		Available:   260,
	}
	if err := env.Client.Status().Update(c, &gotPool); err != nil {
		t.Fatalf("update ProxyIPPool status: %v", err)
	}

	var reVIP v1alpha1.ProxyVIP
	if err := env.Client.Get(c, client.ObjectKeyFromObject(vip), &reVIP); err != nil {
		t.Fatalf("get ProxyVIP: %v", err)
	}
	if reVIP.Status.Address != "10.200.0.1" || reVIP.Status.ActiveNode != "node-a" || len(reVIP.Status.Conditions) != 1 {
		t.Errorf("ProxyVIP status after update = %+v", reVIP.Status)
	}
	var rePool v1alpha1.ProxyIPPool
	if err := env.Client.Get(c, client.ObjectKeyFromObject(pool), &rePool); err != nil {
		t.Fatalf("get ProxyIPPool: %v", err)
	}
	if len(rePool.Status.Allocations) != 1 || rePool.Status.Allocations[0].Owner != "ProxyVIP/"+vip.Name || rePool.Status.Available != 260 {
		t.Errorf("ProxyIPPool status after update = %+v", rePool.Status)
	}
}

func TestProxyIPPoolValidation(t *testing.T) {
	env := Get(t)
	tests := []struct {
		name      string
		spec      v1alpha1.ProxyIPPoolSpec
		wantField string
		wantMsg   string
	}{
		{
			name:      "not a CIDR",
			spec:      v1alpha1.ProxyIPPoolSpec{CIDRs: []string{"10.200.0.0/24", "not-a-cidr"}},
			wantField: "spec.cidrs[1]",
			wantMsg:   "must be a CIDR with no host bits set",
		},
		{
			name:      "host bits set",
			spec:      v1alpha1.ProxyIPPoolSpec{CIDRs: []string{"10.200.0.1/24"}},
			wantField: "spec.cidrs[0]",
			wantMsg:   "must be a CIDR with no host bits set",
		},
		{
			name:      "empty pool",
			spec:      v1alpha1.ProxyIPPoolSpec{},
			wantField: "spec",
			wantMsg:   "a pool needs at least one entry in cidrs or addresses",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := &v1alpha1.ProxyIPPool{ObjectMeta: metav1.ObjectMeta{GenerateName: "bad-pool-"}, Spec: tt.spec}
			err := env.Client.Create(testCtx(t), pool)
			if err == nil {
				t.Fatalf("create ProxyIPPool with %+v succeeded, want a validation error", tt.spec)
			}
			t.Logf("create: %v", err)
			if !apierrors.IsInvalid(err) {
				t.Fatalf("create ProxyIPPool: got %v, want an Invalid error", err)
			}
			if !strings.Contains(err.Error(), tt.wantField+":") || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not name field %s with %q", err, tt.wantField, tt.wantMsg)
			}
		})
	}
}

func TestGatewayAPIKinds(t *testing.T) {
	env := Get(t)
	c := testCtx(t)
	ns := env.Namespace(t, "gateway")

	class := &gatewayv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "novaedge-"},
		Spec:       gatewayv1.GatewayClassSpec{ControllerName: "novaedge.io/gateway-controller"},
	}
	if err := env.Client.Create(c, class); err != nil {
		t.Fatalf("create GatewayClass: %v", err)
	}
	gw := &gatewayv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: ns},
		Spec: gatewayv1.GatewaySpec{
			GatewayClassName: gatewayv1.ObjectName(class.Name),
			Listeners:        []gatewayv1.Listener{{Name: "http", Port: 80, Protocol: gatewayv1.HTTPProtocolType}},
		},
	}
	if err := env.Client.Create(c, gw); err != nil {
		t.Fatalf("create Gateway: %v", err)
	}
	var routes gatewayv1.HTTPRouteList
	if err := env.Client.List(c, &routes, client.InNamespace(ns)); err != nil {
		t.Fatalf("list HTTPRoutes: %v", err)
	}
}

func TestNamespaceIsFresh(t *testing.T) {
	env := Get(t)
	a, b := env.Namespace(t, "fresh"), env.Namespace(t, "fresh")
	if a == b || !strings.HasPrefix(a, "fresh-") || !strings.HasPrefix(b, "fresh-") {
		t.Fatalf("Namespace gave %q and %q, want two distinct fresh-* names", a, b)
	}
	for _, name := range []string{a, b} {
		var ns corev1.Namespace
		if err := env.Client.Get(testCtx(t), client.ObjectKey{Name: name}, &ns); err != nil {
			t.Errorf("get namespace %s: %v", name, err)
		}
	}
}

func TestKubeconfigFile(t *testing.T) {
	env := Get(t)
	cfg, err := clientcmd.BuildConfigFromFlags("", env.Kubeconfig)
	if err != nil {
		t.Fatalf("load %s: %v", env.Kubeconfig, err)
	}
	cl, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatalf("client from kubeconfig: %v", err)
	}
	var nss corev1.NamespaceList
	if err := cl.List(testCtx(t), &nss); err != nil {
		t.Fatalf("list namespaces through the kubeconfig's user: %v", err)
	}
	if len(nss.Items) == 0 {
		t.Fatal("no namespaces listed; want at least default")
	}
}

// TestControlPlaneDiesWithBinary starts a second test binary that holds its
// own control plane, SIGKILLs it, and checks that its etcd and kube-apiserver
// end too instead of running forever.
func TestControlPlaneDiesWithBinary(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start child test binary: %v", err)
	}
	var kids []int
	var names []string
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		// Only reached with processes left if the test already failed.
		for i, pid := range kids {
			if alive(pid) && comm(pid) == names[i] {
				if p, err := os.FindProcess(pid); err == nil {
					_ = p.Kill()
				}
			}
		}
	})

	line, err := bufio.NewReader(stdout).ReadString('\n')
	dir, ok := strings.CutPrefix(strings.TrimSpace(line), "ready ")
	if !ok || !strings.HasPrefix(filepath.Base(dir), tempPrefix) {
		t.Fatalf("child test binary did not report ready (%q, %v); its stderr:\n%s", line, err, stderr.String())
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	kids = childrenOf(t, cmd.Process.Pid)
	for _, pid := range kids {
		names = append(names, comm(pid))
	}
	if !containsAll(names, "etcd", "kube-apiserver") {
		t.Fatalf("children of the child test binary are %v (pids %v), want etcd and kube-apiserver", names, kids)
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("kill child test binary: %v", err)
	}
	_ = cmd.Wait()

	// The parent-death signal is sent as the child dies; the wait only
	// covers the kernel tearing the processes down.
	deadline := time.Now().Add(2 * time.Minute)
	for _, pid := range kids {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("%s (pid %d) still runs after its test binary was killed", comm(pid), pid)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// The next start removes what the killed binary left on disk.
	if _, err := os.Stat(filepath.Join(dir, "etcd", "member")); err != nil {
		t.Fatalf("the child's etcd data is not under its kubeenv directory: %v", err)
	}
	sweepStale()
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("sweepStale left %s of the killed binary (stat: %v)", dir, err)
	}
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(t *testing.T, pid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var kids []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, ppid, ok := stat(p); ok && ppid == pid {
			kids = append(kids, p)
		}
	}
	return kids
}

// stat returns the state letter and parent pid from /proc/<pid>/stat.
func stat(pid int) (state string, ppid int, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return "", 0, false
	}
	// The command name is in parentheses and may contain spaces.
	rest := string(b[bytes.LastIndexByte(b, ')')+1:])
	fields := strings.Fields(rest)
	if len(fields) < 2 {
		return "", 0, false
	}
	ppid, err = strconv.Atoi(fields[1])
	return fields[0], ppid, err == nil
}

// alive reports whether pid exists and is not a zombie waiting to be reaped
// (a container's init may never reap it).
func alive(pid int) bool {
	state, _, ok := stat(pid)
	return ok && state != "Z" && state != "X"
}

func comm(pid int) string {
	b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
	return strings.TrimSpace(string(b))
}

func containsAll(have []string, want ...string) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			found = found || h == w
		}
		if !found {
			return false
		}
	}
	return true
}
