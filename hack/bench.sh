#!/usr/bin/env bash
# make bench: installs the baselines (nginx, HAProxy, wrk, h2load), builds
# the binaries, runs the HTTP proxy comparison (perf/httpbench), the slow
# path's scale measurements (perf/routescale), the L4 splicing comparison
# (perf/splice), the XDP fast path's forwarding rate (perf/xdpbench) and cost
# per packet (perf/xdpcost), the control plane's propagation latency,
# snapshot build cost and memory against a real kube-apiserver
# (perf/controlplane), VIP failover in network namespaces beside FRR
# (perf/vipfailover) and the Go micro-benchmarks (the Maglev builder among
# them), and writes everything under perf/results/. Needs root (packages)
# and at least 2 CPUs. Uses only 127.0.0.1 and addresses inside network
# namespaces it creates.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
hack/install-deps.sh --bench
go build -ldflags "-X main.version=bench" -o bin/ ./cmd/...
mkdir -p perf/results
stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
echo "== HTTP proxies side by side (perf/httpbench)"
go run ./perf/httpbench -out perf/results
echo "== route scale: time until a new route serves, memory (perf/routescale)"
go run ./perf/routescale -out perf/results
echo "== L4 splicing: sockmap vs splice(2) through io.Copy (perf/splice)"
go run ./perf/splice -out perf/results
echo "== XDP forwarding rate: trivial XDP_TX vs nftables DNAT vs the fast path, live-frames traffic (perf/xdpbench)"
go run ./perf/xdpbench -out perf/results
echo "== XDP fast path: ns per packet from BPF_PROG_TEST_RUN beside a trivial XDP_TX program (perf/xdpcost)"
go run ./perf/xdpcost -out perf/results
echo "== control plane: EndpointSlice change and a new ProxyRoute among 3000 to agent ACK beside a plain watch, snapshot build beside proto.Marshal, controller memory beside an empty cluster (perf/controlplane)"
assets="$(hack/envtest-assets.sh)"
KUBEBUILDER_ASSETS="$assets" go run ./perf/controlplane -out perf/results -controller bin/novaedge-controller
echo "== VIP failover: L2 SIGKILL of the active to the standby's ARP, BGP silence to FRR dropping the path with BFD 3 x 100/300 ms and without, beside FRR to FRR (perf/vipfailover)"
go run ./perf/vipfailover -out perf/results -agent bin/novaedge-agent
echo "== Go micro-benchmarks (router, balancers, proxy path, Maglev builder and lineage)"
go test -run '^$' -bench . -benchmem -benchtime 2s ./slowpath/router ./slowpath/lb ./slowpath ./fastpath/maglev ./fastpath/lineage | tee "perf/results/go-bench-$stamp.txt"
echo "results in perf/results/"
