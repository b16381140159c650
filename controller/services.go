package controller

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/novaedge/novaedge/snapshot"
)

// Annotations the leader writes on the Services it serves: their
// assignment, which has no place in a Service's status. Users read them;
// they must not set them.
const (
	AnnotationActiveNode     = "novaedge.io/active-node"
	AnnotationStandbyNodes   = "novaedge.io/standby-nodes"
	AnnotationAnnouncingNode = "novaedge.io/announcing-nodes"
)

// serviceVIP is the VIP of one Service, or of the Services sharing one
// address.
type serviceVIP struct {
	vip string
	// members, oldest first; the first one's request and status decide.
	members []snapshot.ServiceInfo
	// addrs held now (status.loadBalancer.ingress of the members).
	addrs      []netip.Addr
	assignment assignment
	// local: externalTrafficPolicy Local; localNodes host a ready endpoint.
	local      bool
	localNodes map[string]bool
}

// servedServices groups the Services NovaEdge serves by VIP.
func servedServices(in *snapshot.Input, skipClassless bool) []*serviceVIP {
	svcByKey := map[string]*corev1.Service{}
	for i := range in.Services {
		s := &in.Services[i]
		svcByKey[s.Namespace+"/"+s.Name] = s
	}
	byVIP := map[string]*serviceVIP{}
	var out []*serviceVIP
	for _, info := range snapshot.ServedServices(in, snapshot.Options{SkipClasslessServices: skipClassless}) {
		if info.Problem != "" {
			continue
		}
		v := byVIP[info.VIP]
		if v == nil {
			v = &serviceVIP{vip: info.VIP, localNodes: map[string]bool{}}
			byVIP[info.VIP] = v
			out = append(out, v)
		}
		v.members = append(v.members, info)
		for _, a := range info.Current {
			if !slices.Contains(v.addrs, a) {
				v.addrs = append(v.addrs, a)
			}
		}
		if info.LocalTraffic {
			v.local = true
			for _, n := range info.EndpointNodes {
				v.localNodes[n] = true
			}
		}
	}
	for _, v := range out {
		slices.SortStableFunc(v.members, func(a, b snapshot.ServiceInfo) int {
			return cmp.Or(a.Created.Compare(b.Created.Time), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
		})
		if s := svcByKey[v.members[0].Namespace+"/"+v.members[0].Name]; s != nil {
			v.assignment = serviceAssignment(s)
		}
		v.addrs = sortedAddrs(v.addrs)
	}
	return out
}

func serviceAssignment(s *corev1.Service) assignment {
	split := func(v string) []string {
		if v == "" {
			return nil
		}
		return strings.Split(v, ",")
	}
	return assignment{snapshot.Assignment{
		Active:     s.Annotations[AnnotationActiveNode],
		Standbys:   split(s.Annotations[AnnotationStandbyNodes]),
		Announcing: split(s.Annotations[AnnotationAnnouncingNode]),
	}}
}

// serviceForVIP finds the Service VIP named vip.
func serviceForVIP(svcs []*serviceVIP, vip string) *serviceVIP {
	for _, v := range svcs {
		if v.vip == vip {
			return v
		}
	}
	return nil
}

// writeServices persists each served Service's addresses in
// status.loadBalancer.ingress and its assignment in annotations.
func (d *decider) writeServices(ctx context.Context, w *world, allocs map[string]*allocation, asgs map[string]scheduled, idx problemIndex) []error {
	svcByKey := map[string]*corev1.Service{}
	for i := range w.in.Services {
		s := &w.in.Services[i]
		svcByKey[s.Namespace+"/"+s.Name] = s
	}
	var errs []error
	for _, v := range w.services {
		a := allocs[v.vip]
		s, served := asgs[v.vip]
		for _, m := range v.members {
			svc := svcByKey[m.Namespace+"/"+m.Name]
			if svc == nil {
				continue
			}
			var ingress []corev1.LoadBalancerIngress
			if a != nil {
				for _, addr := range sortedAddrs(a.addrs) {
					// The fast path forwards these flows at L4; kube-proxy
					// may short-cut in-cluster clients to the endpoints.
					ingress = append(ingress, corev1.LoadBalancerIngress{IP: addr.String(), IPMode: ptr(corev1.LoadBalancerIPModeVIP)})
				}
			}
			if !equality.Semantic.DeepEqual(svc.Status.LoadBalancer.Ingress, ingress) {
				orig := svc.DeepCopy()
				svc.Status.LoadBalancer.Ingress = ingress
				if err := d.c.mgr.GetClient().Status().Patch(ctx, svc, client.MergeFrom(orig)); err != nil {
					errs = append(errs, fmt.Errorf("update status of Service %s/%s: %w", svc.Namespace, svc.Name, err))
					continue
				}
				if len(ingress) > 0 {
					var ips []string
					for _, in := range ingress {
						ips = append(ips, in.IP)
					}
					d.c.recorder.Eventf(svc, nil, corev1.EventTypeNormal, ReasonAllocated, "Allocate", "address %s", strings.Join(ips, ", "))
				}
			}
			if a != nil && len(a.problems) > 0 {
				d.warnOnce(svc, ReasonPoolProblem, strings.Join(a.problems, "; "))
			}
			want := map[string]string{}
			if served {
				want[AnnotationActiveNode] = s.Assignment.Active
				want[AnnotationStandbyNodes] = strings.Join(s.Assignment.Standbys, ",")
				want[AnnotationAnnouncingNode] = strings.Join(s.Assignment.Announcing, ",")
			}
			if err := d.annotate(ctx, svc, want); err != nil {
				errs = append(errs, err)
			} else if served && s.Changed && s.Reason != "" {
				d.c.recorder.Eventf(svc, nil, corev1.EventTypeNormal, "Assigned", "Schedule", "%s", s.Reason)
			}
		}
	}
	// A Service the build leaves out says why, once.
	for ref, l := range idx {
		if ref.Kind != "Service" || !l.HasErrors() {
			continue
		}
		if svc := svcByKey[ref.Namespace+"/"+ref.Name]; svc != nil {
			d.warnOnce(svc, ReasonInvalid, idx.accepted(ref, 0).Message)
		}
	}
	return errs
}

// annotate sets the assignment annotations of svc to want (empty values
// removed) with a merge patch, when they differ.
func (d *decider) annotate(ctx context.Context, svc *corev1.Service, want map[string]string) error {
	changed := false
	for _, k := range []string{AnnotationActiveNode, AnnotationStandbyNodes, AnnotationAnnouncingNode} {
		if svc.Annotations[k] != want[k] {
			changed = true
		}
	}
	if !changed {
		return nil
	}
	orig := svc.DeepCopy()
	if svc.Annotations == nil {
		svc.Annotations = map[string]string{}
	}
	for _, k := range []string{AnnotationActiveNode, AnnotationStandbyNodes, AnnotationAnnouncingNode} {
		if want[k] == "" {
			delete(svc.Annotations, k)
		} else {
			svc.Annotations[k] = want[k]
		}
	}
	if err := d.c.mgr.GetClient().Patch(ctx, svc, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("annotate Service %s/%s with its nodes: %w", svc.Namespace, svc.Name, err)
	}
	return nil
}

// warnOnce emits a Warning Event on obj unless the same message was the
// last one for it (kept in memory: a new leader says it once more).
func (d *decider) warnOnce(svc *corev1.Service, reason, msg string) {
	k := svc.Namespace + "/" + svc.Name + "/" + reason
	if d.warned[k] == msg {
		return
	}
	if d.warned == nil {
		d.warned = map[string]string{}
	}
	d.warned[k] = msg
	d.c.recorder.Eventf(svc, nil, corev1.EventTypeWarning, reason, "Validate", "%s", msg)
}
