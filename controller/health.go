package controller

import (
	"net"
	"slices"
	"strconv"

	"github.com/novaedge/novaedge/agent/lease"
	"github.com/novaedge/novaedge/api/v1alpha1"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/snapshot"
)

// failingEndpoints are the endpoints ("address:port") that more than half
// of the Ready nodes running an agent report, through fresh Leases, as
// failing their active health checks. Deciding once, here, keeps every
// node's tables the same (a flow moved by ECMP still finds its backend); a
// majority keeps one node's broken path to a backend from taking it away
// from all. Agents whose Lease went stale count in the electorate but not as
// reports: a moment's missed renewals must not hand the decision to the
// few whose renewals got through (taking an endpoint out needs evidence).
func failingEndpoints(w *world, elig eligibility) map[string]bool {
	count := map[string]int{}
	for _, node := range elig.order {
		for _, ep := range lease.ProbeFailures(w.agentLeases[node]) {
			count[ep]++
		}
	}
	out := map[string]bool{}
	electorate := max(elig.agents, len(elig.order))
	for ep, n := range count {
		if 2*n > electorate {
			out[ep] = true
		}
	}
	return out
}

// backendHealth is the status the decider wants on each ProxyBackend:
// endpoint counts and the endpoints taken out on probe results.
type backendHealth struct {
	built   map[string]*pb.Backend // "ns/name" → the built backend
	failing map[string]bool
}

func newBackendHealth(snap *pb.ConfigSnapshot, failing map[string]bool) backendHealth {
	h := backendHealth{built: map[string]*pb.Backend{}, failing: failing}
	for _, b := range snap.GetCluster().GetBackends() {
		h.built[b.GetName()] = b
	}
	return h
}

// endpointKey is "address:port" as probes and snapshot.Decisions name it.
func endpointKey(e *pb.Endpoint) string {
	return net.JoinHostPort(e.GetAddress(), strconv.FormatUint(uint64(e.GetPort()), 10))
}

// apply sets o's endpoint counts and unhealthy endpoints from the build and
// reports whether they changed.
func (h backendHealth) apply(o *v1alpha1.ProxyBackend) bool {
	b := h.built[o.Namespace+"/"+o.Name]
	var total, healthy int32
	var unhealthy []string
	for _, e := range b.GetEndpoints() {
		total++
		switch e.GetState() {
		case pb.EndpointState_ENDPOINT_STATE_HEALTHY, pb.EndpointState_ENDPOINT_STATE_UNSPECIFIED:
			healthy++
		case pb.EndpointState_ENDPOINT_STATE_UNHEALTHY:
			// Only probe verdicts: EndpointSlice conditions speak for
			// themselves.
			if k := endpointKey(e); h.failing[k] {
				unhealthy = append(unhealthy, k)
			}
		}
	}
	slices.Sort(unhealthy)
	unhealthy = slices.Compact(unhealthy)
	changed := o.Status.Endpoints != total || o.Status.HealthyEndpoints != healthy || !slices.Equal(o.Status.UnhealthyEndpoints, unhealthy)
	o.Status.Endpoints, o.Status.HealthyEndpoints, o.Status.UnhealthyEndpoints = total, healthy, unhealthy
	return changed
}

// persistedHealth reads the probe verdicts the leader wrote back.
func persistedHealth(in *snapshot.Input, d *snapshot.Decisions) {
	for i := range in.Backends {
		for _, ep := range in.Backends[i].Status.UnhealthyEndpoints {
			d.EndpointHealth[ep] = false
		}
	}
}
