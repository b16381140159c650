package manager

import (
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// Serving reports, for each VIP named in cluster's plan, whether traffic
// to it can reach a backend, and why not when it cannot. The rule, from the
// snapshot alone (health is decided once, by the controller or the
// standalone agent, and shipped in the snapshot):
//
//   - A FAST plan entry can serve when one of its endpoints is HEALTHY.
//   - A SLOW plan entry can serve when its listener answers by itself
//     (a redirect listener), or when a rule of a route attached to its
//     listener either has no backends (it answers with a redirect or a
//     direct response) or names a backend with a HEALTHY endpoint.
//   - A VIP can serve when one of its plan entries can. A VIP is withdrawn
//     only when it has plan entries and none can serve; a VIP without plan
//     entries (no listener binds it) is not judged and stays announced.
//
// VIPs absent from the result are not judged: callers treat them as
// serving.
func Serving(cluster *pb.ClusterConfig) map[string]Verdict {
	listeners := map[string]*pb.Listener{}
	for _, l := range cluster.GetListeners() {
		listeners[l.GetName()] = l
	}
	routes := map[string]*pb.Route{}
	for _, r := range cluster.GetRoutes() {
		routes[r.GetName()] = r
	}
	healthy := map[string]bool{}
	for _, b := range cluster.GetBackends() {
		healthy[b.GetName()] = anyHealthy(b.GetEndpoints())
	}
	out := map[string]Verdict{}
	for _, e := range cluster.GetPlan() {
		name := e.GetVip()
		if name == "" {
			continue
		}
		if out[name].Serving {
			continue
		}
		if entryServes(e, listeners, routes, healthy) {
			out[name] = Verdict{Serving: true}
			continue
		}
		out[name] = Verdict{Reason: "no healthy backend: no plan entry of the VIP reaches a HEALTHY endpoint"}
	}
	return out
}

// Verdict is whether a VIP can serve, and why not.
type Verdict struct {
	Serving bool
	Reason  string
}

func entryServes(e *pb.PlanEntry, listeners map[string]*pb.Listener, routes map[string]*pb.Route, healthy map[string]bool) bool {
	if e.GetPath() == pb.DataPath_DATA_PATH_FAST {
		return anyHealthy(e.GetEndpoints())
	}
	l := listeners[e.GetListener()]
	if l == nil {
		return false
	}
	if l.GetRedirectScheme() != nil {
		return true
	}
	for _, rn := range l.GetRoutes() {
		for _, rule := range routes[rn].GetRules() {
			if len(rule.GetBackends()) == 0 {
				return true
			}
			for _, wb := range rule.GetBackends() {
				if healthy[wb.GetBackend()] {
					return true
				}
			}
		}
	}
	return false
}

func anyHealthy(eps []*pb.Endpoint) bool {
	for _, ep := range eps {
		if ep.GetState() == pb.EndpointState_ENDPOINT_STATE_HEALTHY {
			return true
		}
	}
	return false
}
