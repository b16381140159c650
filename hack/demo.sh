#!/usr/bin/env bash
# NovaEdge demo: a standalone agent serving deploy/examples/standalone.yaml on
# this machine, with demo backends, everything on the loopback interface.
#
# Run by `make demo` after `make build` (it uses bin/novaedge-agent and
# bin/novaedgectl). Needs root: the agent binds the Local VIP 127.0.10.1 on lo.
#
#   hack/demo.sh          start, show what runs, stop and clean up
#   hack/demo.sh --hold   the same, but keep everything running until Ctrl-C
#
# It starts the demo backends and the agent, waits until the agent is ready,
# then shows its health endpoints, a few metrics, `novaedgectl status` and
# `novaedgectl plan`, the VIP bound on lo, and HTTP requests answered through
# the VIP by the slow path. On exit it stops exactly the
# processes it started (by PID) and removes the VIP address from lo (the
# agent keeps its addresses on SIGTERM by design, so a restart does not drop
# traffic), unless the address was already there before the demo.
#
# Only loopback addresses are used; curl is not needed (HTTP is spoken
# through bash's /dev/tcp).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

CONFIG=deploy/examples/standalone.yaml
VIP=127.0.10.1/32
METRICS=127.0.0.1:9090
AGENT=${NOVAEDGE_AGENT:-bin/novaedge-agent} # overridable for testing the script
CTL=${NOVAEDGECTL:-bin/novaedgectl}
READY_TIMEOUT=30 # seconds

hold=false
case "${1:-}" in
  "") ;;
  --hold) hold=true ;;
  -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "demo: unknown argument $1 (try --help)" >&2; exit 2 ;;
esac

bold() { if [[ -t 1 ]]; then printf '\n\033[1m== %s\033[0m\n' "$*"; else printf '\n== %s\n' "$*"; fi; }
die() { echo "demo: $*" >&2; exit 1; }

[[ $EUID -eq 0 ]] || die "run as root (sudo make demo): the agent binds $VIP on lo"
for b in "$AGENT" "$CTL"; do
  [[ -x $b ]] || die "$b is missing: run 'make build' first (make demo does)"
done
command -v ip >/dev/null || die "the ip command is missing (apt-get install iproute2)"

# http_get HOST:PORT PATH [HEADER] prints the response body; it succeeds on
# status 200. Plain bash: /dev/tcp and HTTP/1.0, so curl is not needed.
http_get() {
  local resp
  resp=$(http_raw "$@") || return 1
  local status=${resp%%$'\r'*}
  printf '%s' "${resp#*$'\r\n\r\n'}"
  [[ $status == HTTP/1.?" 200"* ]]
}

# http_head HOST:PORT PATH prints the status line and headers.
http_head() {
  local resp
  resp=$(http_raw "$@") || return 1
  printf '%s\n' "${resp%%$'\r\n\r\n'*}" | tr -d '\r' | sed 's/^/  /'
}

http_raw() {
  local host=${1%:*} port=${1##*:} path=$2 extra=${3:-}
  timeout 3 bash -c '
    exec 3<>"/dev/tcp/$0/$1" || exit 1
    printf "GET %s HTTP/1.0\r\nHost: %s\r\nConnection: close\r\n" "$2" "$0" >&3
    [[ -n $3 ]] && printf "%s\r\n" "$3" >&3
    printf "\r\n" >&3
    cat <&3' "$host" "$port" "$path" "$extra" 2>/dev/null
}

# port_free HOST:PORT succeeds when nothing accepts connections there.
port_free() {
  ! timeout 1 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "${1%:*}" "${1##*:}" 2>/dev/null
}

for addr in 127.0.0.1:18081 127.0.0.1:18082 127.0.0.1:19001 127.0.0.1:19002 "$METRICS"; do
  port_free "$addr" || die "$addr is in use; stop what listens there (is another demo running?)"
done

tmp=$(mktemp -d /tmp/novaedge-demo.XXXXXX)
pids=()
# vip_bound succeeds when the VIP is an address of lo.
vip_bound() { [[ -n $(ip -o addr show dev lo to "$VIP") ]]; }
vip_was_bound=false
if vip_bound; then
  vip_was_bound=true
fi

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if ((${#pids[@]} > 0)); then
    bold "stopping (PIDs ${pids[*]})"
    for pid in "${pids[@]}"; do
      kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
      for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
      done
      if kill -0 "$pid" 2>/dev/null; then
        echo "demo: PID $pid did not stop after SIGTERM; sending SIGKILL" >&2
        kill -KILL "$pid" 2>/dev/null || true
      fi
      wait "$pid" 2>/dev/null || true
    done
  fi
  # The agent leaves its addresses in place on SIGTERM (so an upgrade does
  # not drop traffic); the demo is over, so release the VIP it bound.
  if ! $vip_was_bound && vip_bound; then
    ip addr del "$VIP" dev lo && echo "released $VIP from lo"
  fi
  if $hold && ((rc == 130 || rc == 143)); then
    rc=0 # --hold ends with Ctrl-C or SIGTERM: that is the normal way out
  fi
  if ((rc != 0 && rc != 130 && rc != 143)) && [[ -s $tmp/agent.log ]]; then
    echo "--- last lines of the agent's log ($tmp/agent.log) ---" >&2
    tail -n 30 "$tmp/agent.log" >&2
    echo "demo: failed; $tmp is kept for inspection" >&2
  else
    rm -rf "$tmp"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

bold "novaedgectl validate $CONFIG"
"$CTL" validate "$CONFIG"

bold "starting the demo backends"
start() { # name, then the command; logs go to $tmp/name.log
  local name=$1
  shift
  "$@" >"$tmp/$name.log" 2>&1 &
  pids+=("$!")
  echo "  $name (PID $!): ${*:2}"
}
start web-1 "$CTL" demo-backend --listen 127.0.0.1:18081 --name web-1
start web-2 "$CTL" demo-backend --listen 127.0.0.1:18082 --name web-2
start echo-1 "$CTL" demo-backend --tcp --listen 127.0.0.1:19001
start echo-2 "$CTL" demo-backend --tcp --listen 127.0.0.1:19002

bold "starting the agent"
"$AGENT" --standalone --config "$CONFIG" \
  --admin-socket "$tmp/agent.sock" --metrics-addr "$METRICS" --state-dir "$tmp" --handoff-socket "$tmp/handoff.sock" \
  --fastpath off >"$tmp/agent.log" 2>&1 &
pids+=("$!")
agent_pid=$!
echo "  novaedge-agent (PID $agent_pid), log in $tmp/agent.log"

echo -n "  waiting for http://$METRICS/readyz "
for ((i = 0; i < READY_TIMEOUT * 5; i++)); do
  kill -0 "$agent_pid" 2>/dev/null || { echo; die "the agent exited"; }
  if http_get "$METRICS" /readyz >/dev/null; then
    break
  fi
  ((i % 5 == 0)) && echo -n .
  sleep 0.2
done
echo
http_get "$METRICS" /readyz >/dev/null || die "the agent is not ready after ${READY_TIMEOUT}s"

bold "the backends answer directly"
for b in 127.0.0.1:18081 127.0.0.1:18082; do
  echo "  $b: $(http_get "$b" / || echo "no answer")"
done

bold "GET http://$METRICS/healthz"
http_get "$METRICS" /healthz || true
echo
bold "GET http://$METRICS/readyz"
http_get "$METRICS" /readyz || true
echo
bold "GET http://$METRICS/metrics (first novaedge_ lines)"
http_get "$METRICS" /metrics | grep '^novaedge_' | head -n 15 || true

bold "novaedgectl status"
"$CTL" --socket "$tmp/agent.sock" status
bold "novaedgectl plan"
"$CTL" --socket "$tmp/agent.sock" plan
bold "ip -br addr show lo (the Local VIP $VIP)"
ip -br addr show dev lo

bold "HTTP through the VIP: GET http://${VIP%/*}:8080/ (slow path, route demo/web, P2C over web-1 and web-2)"
for i in 1 2 3 4; do
  echo "  request $i: $(http_get "${VIP%/*}:8080" / || echo "no answer")"
done
bold "GET http://${VIP%/*}:8080/api/orders with X-Canary: always (rule api-canary: 90/10 split)"
echo "  $(http_get "${VIP%/*}:8080" /api/orders "X-Canary: always" || echo "no answer")"
bold "response headers of GET http://${VIP%/*}:8080/"
http_head "${VIP%/*}:8080" / || true

bold "TCP through the VIP: a line to ${VIP%/*}:9000 (route demo/tcp-echo, Maglev over echo-1 and echo-2)"
tcp_reply=$(timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/9000" || exit 1; printf "hello over TCP\n" >&3; IFS= read -r line <&3; printf "%s" "$line"' "${VIP%/*}" 2>/dev/null) || tcp_reply="no answer"
echo "  sent \"hello over TCP\", got back \"$tcp_reply\""

echo
echo "Note: the plan gives ${VIP%/*}:9000 to the XDP fast path, but XDP runs on network interfaces and this"
echo "part of the demo talks over loopback, so the slow path's listener serves it (as it serves clients on the"
echo "node itself in production). The next part shows XDP balancing in network namespaces."

if [[ ${NOVAEDGE_DEMO_FASTPATH:-1} == 1 ]]; then
  bold "part 2: the XDP fast path in a network-namespace testbed (hack/demo-fastpath.sh)"
  NOVAEDGE_AGENT="$AGENT" NOVAEDGECTL="$CTL" hack/demo-fastpath.sh
fi

if $hold; then
  bold "running; try: $CTL --socket $tmp/agent.sock errors   (Ctrl-C stops everything)"
  wait "$agent_pid" || true
fi
