package lease

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/novaedge/novaedge/test/kubeenv"
)

func TestMain(m *testing.M) { os.Exit(kubeenv.Run(m)) }

// t0 is the fake clock's start; whole seconds survive the API's microsecond
// timestamps unchanged.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func ptr[T any](v T) *T { return &v }

func TestFresh(t *testing.T) {
	renewed := metav1.NewMicroTime(t0)
	lease := func(renew *metav1.MicroTime, seconds *int32) *coordinationv1.Lease {
		return &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{RenewTime: renew, LeaseDurationSeconds: seconds}}
	}
	tests := []struct {
		name  string
		lease *coordinationv1.Lease
		now   time.Time
		want  bool
	}{
		{"nil lease", nil, t0, false},
		{"no renew time", lease(nil, ptr[int32](10)), t0, false},
		{"no duration", lease(&renewed, nil), t0, false},
		{"zero duration", lease(&renewed, ptr[int32](0)), t0, false},
		{"negative duration", lease(&renewed, ptr[int32](-5)), t0, false},
		{"just renewed", lease(&renewed, ptr[int32](10)), t0, true},
		{"renewed in the future (clock skew)", lease(&renewed, ptr[int32](10)), t0.Add(-time.Minute), true},
		{"one nanosecond before expiry", lease(&renewed, ptr[int32](10)), t0.Add(10*time.Second - time.Nanosecond), true},
		{"at expiry", lease(&renewed, ptr[int32](10)), t0.Add(10 * time.Second), false},
		{"after expiry", lease(&renewed, ptr[int32](10)), t0.Add(time.Hour), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Fresh(tt.lease, tt.now); got != tt.want {
				t.Errorf("Fresh(%s) = %v, want %v", tt.name, got, tt.want)
			}
		})
	}
}

func TestNameAndNodeOf(t *testing.T) {
	tests := []struct {
		lease    string
		wantNode string
		wantOK   bool
	}{
		{Name("worker-1"), "worker-1", true},
		{"novaedge-agent-node.example.com", "node.example.com", true},
		{"novaedge-agent-", "", false},
		{"novaedge-controller", "", false},
		{"kube-node-lease", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.lease, func(t *testing.T) {
			node, ok := NodeOf(tt.lease)
			if node != tt.wantNode || ok != tt.wantOK {
				t.Errorf("NodeOf(%q) = %q, %v; want %q, %v", tt.lease, node, ok, tt.wantNode, tt.wantOK)
			}
		})
	}
	if got := Name("worker-1"); got != "novaedge-agent-worker-1" {
		t.Errorf("Name(worker-1) = %q", got)
	}
}

func TestNewOptions(t *testing.T) {
	cs := fake.NewClientset()
	tests := []struct {
		name         string
		opts         Options
		wantErr      string
		wantSeconds  int32
		wantInterval time.Duration
	}{
		{"defaults", Options{Client: fakeLeases{cs}, Namespace: "ns", Node: "n1"}, "", 10, 10 * time.Second / 3},
		{"explicit", Options{Client: fakeLeases{cs}, Namespace: "ns", Node: "n1", Duration: 30 * time.Second, RenewInterval: 5 * time.Second}, "", 30, 5 * time.Second},
		{"no client", Options{Namespace: "ns", Node: "n1"}, "client is nil", 0, 0},
		{"no namespace", Options{Client: fakeLeases{cs}, Node: "n1"}, "namespace is empty", 0, 0},
		{"bad namespace", Options{Client: fakeLeases{cs}, Namespace: "Bad_NS", Node: "n1"}, `namespace "Bad_NS"`, 0, 0},
		{"no node", Options{Client: fakeLeases{cs}, Namespace: "ns"}, "node name is empty", 0, 0},
		{"bad node", Options{Client: fakeLeases{cs}, Namespace: "ns", Node: "Node_1"}, `node "Node_1"`, 0, 0},
		{"fractional duration", Options{Client: fakeLeases{cs}, Namespace: "ns", Node: "n1", Duration: 1500 * time.Millisecond}, "duration 1.5s", 0, 0},
		{"interval not shorter", Options{Client: fakeLeases{cs}, Namespace: "ns", Node: "n1", Duration: 5 * time.Second, RenewInterval: 5 * time.Second}, "renew interval 5s", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(tt.opts)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("New: error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if r.seconds != tt.wantSeconds || r.interval != tt.wantInterval {
				t.Errorf("duration %ds interval %v, want %ds %v", r.seconds, r.interval, tt.wantSeconds, tt.wantInterval)
			}
			if !strings.HasPrefix(r.Identity(), tt.opts.Node+"/") || len(r.Identity()) <= len(tt.opts.Node)+1 {
				t.Errorf("identity %q, want %s/<id>", r.Identity(), tt.opts.Node)
			}
		})
	}
	a, _ := New(Options{Client: fakeLeases{cs}, Namespace: "ns", Node: "n1"})
	b, _ := New(Options{Client: fakeLeases{cs}, Namespace: "ns", Node: "n1"})
	if a.Identity() == b.Identity() {
		t.Errorf("two Renewers share the identity %q; each process must have its own", a.Identity())
	}
}

// running starts r.Run and returns a function that stops it and waits.
func running(t *testing.T, r *Renewer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

// waitLease polls the Lease until ok accepts it. The deadline only keeps a
// broken renewer from hanging the test; nothing is asserted about timing.
func waitLease(t *testing.T, cs kubernetes.Interface, ns, name, what string, ok func(*coordinationv1.Lease) bool) *coordinationv1.Lease {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	var last *coordinationv1.Lease
	var lastErr error
	for time.Now().Before(deadline) {
		l, err := cs.CoordinationV1().Leases(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil && ok(l) {
			return l
		}
		last, lastErr = l, err
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("lease %s/%s never %s; last %+v, error %v", ns, name, what, last, lastErr)
	return nil
}

func renewedAt(want time.Time) func(*coordinationv1.Lease) bool {
	return func(l *coordinationv1.Lease) bool {
		return l.Spec.RenewTime != nil && l.Spec.RenewTime.Time.Equal(want)
	}
}

func TestRenewerCreatesAndRenews(t *testing.T) {
	env := kubeenv.Get(t)
	ns := env.Namespace(t, "lease")
	clk := clocktesting.NewFakeClock(t0)
	r, err := New(Options{Client: newClient(t, env), Namespace: ns, Node: "worker-1", Clock: clk, RenewInterval: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	stop := running(t, r)

	l := waitLease(t, env.Clientset, ns, "novaedge-agent-worker-1", "created", renewedAt(t0))
	if got := deref(l.Spec.HolderIdentity); got != r.Identity() || !strings.HasPrefix(got, "worker-1/") {
		t.Errorf("holderIdentity %q, want %q (worker-1/<id>)", got, r.Identity())
	}
	if got := deref(l.Spec.LeaseDurationSeconds); got != 10 {
		t.Errorf("leaseDurationSeconds %d, want 10", got)
	}
	if l.Spec.AcquireTime == nil || !l.Spec.AcquireTime.Time.Equal(t0) {
		t.Errorf("acquireTime %v, want %v", l.Spec.AcquireTime, t0)
	}
	if !Fresh(l, t0.Add(9*time.Second)) || Fresh(l, t0.Add(10*time.Second)) {
		t.Errorf("created lease: Fresh at +9s/+10s wrong: %+v", l.Spec)
	}

	for i := 1; i <= 2; i++ {
		clk.Step(3 * time.Second)
		want := t0.Add(time.Duration(i) * 3 * time.Second)
		l = waitLease(t, env.Clientset, ns, l.Name, "renewed at "+want.String(), renewedAt(want))
		if !l.Spec.AcquireTime.Time.Equal(t0) || deref(l.Spec.LeaseTransitions) != 0 {
			t.Errorf("renewal %d changed acquireTime %v or leaseTransitions %d", i, l.Spec.AcquireTime, deref(l.Spec.LeaseTransitions))
		}
	}

	// Stopping leaves the Lease as it was: a restarting agent must not look
	// like a dead node.
	stop()
	after, err := env.Clientset.CoordinationV1().Leases(ns).Get(context.Background(), l.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("lease after Run returned: %v", err)
	}
	if !after.Spec.RenewTime.Time.Equal(t0.Add(6*time.Second)) || deref(after.Spec.LeaseDurationSeconds) != 10 || deref(after.Spec.HolderIdentity) != r.Identity() {
		t.Errorf("lease changed on exit: %+v", after.Spec)
	}
	if got := r.LastRenewal(); !got.Equal(t0.Add(6 * time.Second)) {
		t.Errorf("LastRenewal = %v, want %v", got, t0.Add(6*time.Second))
	}
}

func TestRenewerTakesOverPreviousLease(t *testing.T) {
	env := kubeenv.Get(t)
	ns := env.Namespace(t, "lease")
	old := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: Name("worker-2"), Namespace: ns},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr("worker-2/previous-process"),
			LeaseDurationSeconds: ptr[int32](10),
			AcquireTime:          ptr(metav1.NewMicroTime(t0.Add(-2 * time.Hour))),
			RenewTime:            ptr(metav1.NewMicroTime(t0.Add(-time.Hour))),
			LeaseTransitions:     ptr[int32](2),
		},
	}
	if _, err := env.Clientset.CoordinationV1().Leases(ns).Create(context.Background(), old, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	clk := clocktesting.NewFakeClock(t0)
	r, err := New(Options{Client: newClient(t, env), Namespace: ns, Node: "worker-2", Clock: clk, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	stop := running(t, r)
	l := waitLease(t, env.Clientset, ns, old.Name, "taken over", renewedAt(t0))
	stop()
	if got := deref(l.Spec.HolderIdentity); got != r.Identity() {
		t.Errorf("holderIdentity %q, want %q", got, r.Identity())
	}
	if got := deref(l.Spec.LeaseTransitions); got != 3 {
		t.Errorf("leaseTransitions %d, want 3", got)
	}
	if l.Spec.AcquireTime == nil || !l.Spec.AcquireTime.Time.Equal(t0) {
		t.Errorf("acquireTime %v, want %v", l.Spec.AcquireTime, t0)
	}
	if !strings.Contains(logs.String(), "previous_holder=worker-2/previous-process") {
		t.Errorf("no takeover logged; logs:\n%s", logs.String())
	}
}

// TestRenewerRecoversFromOutsideChanges checks that a Lease changed (stale
// resourceVersion) or deleted behind the renewer's back is renewed again.
func TestRenewerRecoversFromOutsideChanges(t *testing.T) {
	env := kubeenv.Get(t)
	ns := env.Namespace(t, "lease")
	leases := env.Clientset.CoordinationV1().Leases(ns)
	clk := clocktesting.NewFakeClock(t0)
	r, err := New(Options{Client: newClient(t, env), Namespace: ns, Node: "worker-3", Clock: clk, RenewInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	running(t, r)
	l := waitLease(t, env.Clientset, ns, Name("worker-3"), "created", renewedAt(t0))

	l.Spec.HolderIdentity = ptr("worker-3/intruder")
	if _, err := leases.Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Second)
	l = waitLease(t, env.Clientset, ns, l.Name, "renewed after a conflict", renewedAt(t0.Add(time.Second)))
	if deref(l.Spec.HolderIdentity) != r.Identity() || deref(l.Spec.LeaseTransitions) != 1 {
		t.Errorf("after the intruder: holder %q transitions %d, want %q and 1", deref(l.Spec.HolderIdentity), deref(l.Spec.LeaseTransitions), r.Identity())
	}

	if err := leases.Delete(context.Background(), l.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Second)
	waitLease(t, env.Clientset, ns, l.Name, "recreated after deletion", renewedAt(t0.Add(2*time.Second)))
}

// TestRenewerLogsOncePerFailureStreak runs against a fake clientset whose
// first three reads fail.
func TestRenewerLogsOncePerFailureStreak(t *testing.T) {
	cs := fake.NewClientset()
	var attempts atomic.Int32
	cs.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if attempts.Add(1) <= 3 {
			return true, nil, apierrors.NewServiceUnavailable("etcd is down")
		}
		return false, nil, nil
	})
	var logs bytes.Buffer
	clk := clocktesting.NewFakeClock(t0)
	r, err := New(Options{Client: fakeLeases{cs}, Namespace: "ns", Node: "worker-4", Clock: clk, RenewInterval: time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	stop := running(t, r)
	for i := int32(1); i <= 3; i++ {
		waitFor(t, func() bool { return attempts.Load() >= i }, "renewal attempt")
		clk.Step(time.Second)
	}
	waitFor(t, func() bool { return !r.LastRenewal().IsZero() }, "a successful renewal")
	stop()

	if got := r.LastRenewal(); !got.Equal(t0.Add(3 * time.Second)) {
		t.Errorf("LastRenewal = %v, want %v", got, t0.Add(3*time.Second))
	}
	obj, err := cs.Tracker().Get(coordinationv1.SchemeGroupVersion.WithResource("leases"), "ns", Name("worker-4"))
	if err != nil {
		t.Fatalf("lease not created after the failures: %v", err)
	}
	if l := obj.(*coordinationv1.Lease); !l.Spec.RenewTime.Time.Equal(t0.Add(3 * time.Second)) {
		t.Errorf("renewTime %v, want %v", l.Spec.RenewTime, t0.Add(3*time.Second))
	}
	out := logs.String()
	if n := strings.Count(out, "level=WARN"); n != 1 || !strings.Contains(out, "etcd is down") {
		t.Errorf("want exactly one warning naming the error for the streak of 3 failures, got %d:\n%s", n, out)
	}
	if !strings.Contains(out, "agent lease renewed again") || !strings.Contains(out, "failed_attempts=3") {
		t.Errorf("recovery not logged with failed_attempts=3:\n%s", out)
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never saw %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// TestRenewerReports: each renewal writes what the agent reports, and
// Healthy reads it back; a Lease without the annotation counts as healthy.
func TestRenewerReports(t *testing.T) {
	env := kubeenv.Get(t)
	ns := env.Namespace(t, "lease")
	clk := clocktesting.NewFakeClock(t0)
	var mu sync.Mutex
	rep := Report{Healthy: false, Reason: "no configuration in service"}
	r, err := New(Options{Client: newClient(t, env), Namespace: ns, Node: "worker-1", Clock: clk, RenewInterval: 3 * time.Second,
		Report: func() Report { mu.Lock(); defer mu.Unlock(); return rep }})
	if err != nil {
		t.Fatal(err)
	}
	running(t, r)
	l := waitLease(t, env.Clientset, ns, Name("worker-1"), "created", renewedAt(t0))
	if Healthy(l) || l.Annotations[AnnotationReason] != "no configuration in service" || l.Annotations[AnnotationAppliedVersion] != "0" {
		t.Errorf("first renewal: healthy=%v annotations %v", Healthy(l), l.Annotations)
	}
	mu.Lock()
	rep = Report{Healthy: true, AppliedVersion: 1<<32 | 7, ProbeFailures: []string{"10.0.0.1:80", "[2001:db8::1]:80"}}
	mu.Unlock()
	clk.Step(3 * time.Second)
	l = waitLease(t, env.Clientset, ns, l.Name, "renewed", renewedAt(t0.Add(3*time.Second)))
	if !Healthy(l) || l.Annotations[AnnotationAppliedVersion] != "4294967303" ||
		!slices.Equal(ProbeFailures(l), []string{"10.0.0.1:80", "[2001:db8::1]:80"}) {
		t.Errorf("second renewal: healthy=%v annotations %v", Healthy(l), l.Annotations)
	}
	if _, ok := l.Annotations[AnnotationReason]; ok {
		t.Errorf("a healthy agent's Lease keeps the reason: %v", l.Annotations)
	}
	if !Healthy(&coordinationv1.Lease{}) || Healthy(nil) {
		t.Error("Healthy: a Lease without the annotation is healthy, no Lease is not")
	}
}

// newClient is the agent's REST client for env's API server.
func newClient(t *testing.T, env *kubeenv.Env) Client {
	t.Helper()
	c, err := NewClient(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fakeLeases is a Client over client-go's fake clientset, for tests that
// inject API failures with reactors.
type fakeLeases struct{ cs kubernetes.Interface }

func (f fakeLeases) Get(ctx context.Context, namespace, name string) (*coordinationv1.Lease, error) {
	return f.cs.CoordinationV1().Leases(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (f fakeLeases) Create(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return f.cs.CoordinationV1().Leases(l.Namespace).Create(ctx, l, metav1.CreateOptions{})
}

func (f fakeLeases) Update(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return f.cs.CoordinationV1().Leases(l.Namespace).Update(ctx, l, metav1.UpdateOptions{})
}
