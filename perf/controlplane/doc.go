// Command controlplane is the control plane's benchmark, run by
// hack/bench.sh (make bench). It measures, each beside a baseline taken in
// the same run on the same machine:
//
//  1. propagation: the time from an EndpointSlice update to the moment the
//     controller has received the ACK of every one of three agents for a
//     snapshot holding the change, with 1, 100 and 1000 Services of type
//     LoadBalancer, at the controller's default debounce (100 ms) and at
//     10 ms; the baseline is a plain client-go informer in the same process
//     receiving the update's watch event (the API server's own
//     propagation);
//  2. build: snapshot.Build for 10 000 routes and 1 000 backends, beside
//     proto.Marshal of the snapshot it produced, and for 100 nodes as the
//     controller builds them;
//  3. routes: the time from creating a ProxyRoute, with 3000 in place, to
//     every agent's ACK of a snapshot holding it, beside a watch of
//     ProxyRoutes in the same process;
//  4. memory: the resident set of a novaedge-controller process holding
//     10 000 ProxyRoutes and 1 000 ProxyBackends, beside the same process
//     with an empty cluster.
//
// The Kubernetes API is a real kube-apiserver and etcd started through
// test/kubeenv (KUBEBUILDER_ASSETS, else hack/envtest-assets.sh). Only
// 127.0.0.1 is used. The report goes to <out>/controlplane-<time>.md.
package main
