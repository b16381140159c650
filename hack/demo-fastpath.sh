#!/usr/bin/env bash
# NovaEdge demo, part 2: L4 traffic balanced by the XDP fast path, in a
# network-namespace testbed that the script builds and removes:
#
#   client ns ──veth── node ns (novaedge-agent, XDP on both its veths) ──veth── backend ns b1
#                                                                      └─veth── backend ns b2
#
# The agent serves deploy/examples/fastpath-demo.yaml: VIP 10.97.0.10:80/TCP,
# a TCP listener with one route, so the plan gives it to the fast path (NAT).
# The client sends HTTP requests to the VIP, each on a new connection; XDP
# picks a backend with Maglev, rewrites the packets (DNAT + SNAT) and sends
# them on without the kernel's network stack; the replies are translated back
# in XDP too. `novaedgectl fastpath` then shows the VIPs, backends, Maglev
# shares, tracked flows and counters from the pinned maps.
#
# Run by hack/demo.sh (make demo) after the loopback part; alone:
#   hack/demo-fastpath.sh [--hold]
# Needs root. Only addresses inside the namespaces it creates are used.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

AGENT=${NOVAEDGE_AGENT:-bin/novaedge-agent}
CTL=${NOVAEDGECTL:-bin/novaedgectl}
CONFIG=deploy/examples/fastpath-demo.yaml
VIP=10.97.0.10
READY_TIMEOUT=30

hold=false
[[ ${1:-} == --hold ]] && hold=true

bold() { if [[ -t 1 ]]; then printf '\n\033[1m== %s\033[0m\n' "$*"; else printf '\n== %s\n' "$*"; fi; }
die() { echo "demo-fastpath: $*" >&2; exit 1; }
[[ $EUID -eq 0 ]] || die "run as root: the demo creates network namespaces and loads XDP programs"
for b in "$AGENT" "$CTL"; do
  [[ -x $b ]] || die "$b is missing: run 'make build' first (make demo does)"
done
for c in ip nsenter ethtool; do
  command -v "$c" >/dev/null || die "the $c command is missing"
done

id=$$
ns_client=nvdemo-$id-client
ns_node=nvdemo-$id-node
ns_b=(nvdemo-$id-b1 nvdemo-$id-b2)
bpf_root=/sys/fs/bpf/novaedge-demo-$id
tmp=$(mktemp -d /tmp/novaedge-demo-fastpath.XXXXXX)
pids=()
created=()

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  bold "stopping the fast-path demo"
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  # The agent leaves the program attached on SIGTERM (traffic keeps flowing
  # through restarts); the demo is over, so uninstall it.
  if [[ -d $bpf_root ]]; then
    nsenter --net="/run/netns/$ns_node" "$CTL" fastpath uninstall --bpf-root "$bpf_root" | sed 's/^/  /' || true
  fi
  for ns in "${created[@]}"; do ip netns del "$ns" 2>/dev/null && echo "  removed namespace $ns"; done
  if ((rc != 0 && rc != 130 && rc != 143)) && [[ -s $tmp/agent.log ]]; then
    echo "--- last lines of the agent's log ---" >&2
    tail -n 30 "$tmp/agent.log" >&2
  fi
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

bold "building the testbed: client → node (XDP) → backends b1, b2"
for ns in "$ns_client" "$ns_node" "${ns_b[@]}"; do
  ip netns add "$ns"
  created+=("$ns")
  ip -n "$ns" link set lo up
done
# veth A_NS A_IF B_NS B_IF: a pair, up, TX checksum offload off (XDP forwards
# the frames as they are, so their checksums must be complete).
veth() {
  ip link add "$2" netns "$1" type veth peer name "$4" netns "$3"
  for x in "$1 $2" "$3 $4"; do
    set -- $x
    ip -n "$1" link set "$2" up
    ip netns exec "$1" ethtool -K "$2" tx off >/dev/null
  done
}
veth "$ns_client" eth0 "$ns_node" to-client
ip -n "$ns_client" addr add 10.97.1.2/24 dev eth0
ip -n "$ns_client" route add 10.97.0.0/24 via 10.97.1.1
ip -n "$ns_node" addr add 10.97.1.1/24 dev to-client
ifaces=(--interface to-client)
for i in 0 1; do
  n=$((i + 1))
  veth "$ns_node" "to-b$n" "${ns_b[$i]}" eth0
  ip -n "$ns_node" addr add "10.97.1$n.1/24" dev "to-b$n"
  ip -n "${ns_b[$i]}" addr add "10.97.1$n.2/24" dev eth0
  ip -n "${ns_b[$i]}" route add default via "10.97.1$n.1"
  ifaces+=(--interface "to-b$n")
done
ip netns exec "$ns_node" sysctl -qw net.ipv4.ip_forward=1
echo "  namespaces: ${created[*]}"

bold "starting the backends (HTTP, one per backend namespace)"
for i in 0 1; do
  n=$((i + 1))
  ip netns exec "${ns_b[$i]}" "$CTL" demo-backend --listen "10.97.1$n.2:8080" --name "b$n" >"$tmp/b$n.log" 2>&1 &
  pids+=("$!")
  echo "  b$n (PID $!): 10.97.1$n.2:8080"
done

bold "starting the agent in the node namespace with the fast path on its veths"
# nsenter enters only the network namespace, so the agent pins on the
# host's bpffs as it would on a node (ip netns exec gives a private /sys).
# Generic XDP: native XDP_TX/redirect into a veth needs a program on the peer.
nsenter --net="/run/netns/$ns_node" "$AGENT" --standalone --config "$CONFIG" \
  --fastpath on --xdp-mode generic "${ifaces[@]}" --bpf-root "$bpf_root" \
  --admin-socket "$tmp/agent.sock" --metrics-addr 127.0.0.1:9090 --state-dir "$tmp/state" --handoff-socket "" \
  >"$tmp/agent.log" 2>&1 &
agent_pid=$!
pids+=("$agent_pid")
echo "  novaedge-agent (PID $agent_pid), log in $tmp/agent.log"
for ((i = 0; i < READY_TIMEOUT * 5; i++)); do
  kill -0 "$agent_pid" 2>/dev/null || die "the agent exited"
  if "$CTL" --socket "$tmp/agent.sock" plan >/dev/null 2>&1; then
    break
  fi
  sleep 0.2
done
"$CTL" --socket "$tmp/agent.sock" plan | sed 's/^/  /'
grep 'fast path attached' "$tmp/agent.log" | sed 's/^/  /' || true

bold "HTTP to the VIP from the client namespace: a new connection per request, balanced by XDP"
for i in $(seq 1 12); do
  reply=$(ip netns exec "$ns_client" timeout 3 bash -c '
    exec 3<>"/dev/tcp/$0/80" || exit 1
    printf "GET / HTTP/1.0\r\nHost: demo\r\n\r\n" >&3
    tail -n 1 <&3' "$VIP" 2>/dev/null) || reply="no answer"
  echo "  request $i: $reply"
done

fp() { nsenter --net="/run/netns/$ns_node" "$CTL" fastpath "$@" --bpf-root "$bpf_root" | sed 's/^/  /'; }
bold "novaedgectl fastpath status"; fp status
bold "novaedgectl fastpath vips"; fp vips
bold "novaedgectl fastpath backends"; fp backends
bold "novaedgectl fastpath maglev $VIP:80/tcp"; fp maglev "$VIP:80/tcp"
bold "novaedgectl fastpath conntrack"; fp conntrack
bold "novaedgectl fastpath stats (non-zero)"
nsenter --net="/run/netns/$ns_node" "$CTL" fastpath stats --bpf-root "$bpf_root" | awk 'NR == 1 || $2 != 0' | sed 's/^/  /'
echo
echo "The same maps, with BTF field names: bpftool map dump pinned $bpf_root/v1/maps/fp_vips"

if $hold; then
  bold "running; Ctrl-C stops everything"
  wait "$agent_pid" || true
fi
