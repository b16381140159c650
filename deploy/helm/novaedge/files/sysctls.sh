#!/bin/sh
# sysctls.sh runs in the agent pod's "sysctls" init container. It sets, in the
# host's network namespace, the two sysctls the XDP fast path needs, so the
# agent need not be privileged:
#
#   net.ipv4.conf.<if>.accept_local=1 on every interface the fast path
#     attaches to: frames the XDP program rewrote but hands to the kernel
#     carry the node's own address as source and are dropped as martians
#     otherwise;
#   net.ipv4.ip_local_reserved_ports gains NAT_PORT_RANGE, the SNAT ports, so
#     the host never picks them for its own connections.
#
# Container runtimes mount /proc/sys read-only in unprivileged containers, so
# the pod mounts the host's /proc/sys/net at /host/proc/sys/net. Writing a
# network sysctl there needs uid 0 and no capability (the sysctl belongs to
# the pod's network namespace, the host's); the container drops them all.
#
# The interfaces are resolved as the agent resolves them: the named ones
# (INTERFACES, separated by spaces) or the interfaces of the best IPv4
# default route, else of the best IPv6 one; a VLAN stands for its parent and
# a bond for its slaves. The IPv4 routing table in /proc/net/route shows only
# the first nexthop of a multipath route: name the interfaces with
# agent.interfaces there.
#
# With FASTPATH=auto a problem is reported and the pod starts anyway (the
# agent then serves everything from the slow path and says why); with
# FASTPATH=on the init container fails, as the agent would.
#
# The environment may move the files it reads and writes (the chart's tests
# do): SYSCTL_NET (default /host/proc/sys/net), SYS_CLASS_NET
# (/sys/class/net) and PROC_NET (/proc/net).
set -u

sysctl_net=${SYSCTL_NET:-/host/proc/sys/net}
sys_class_net=${SYS_CLASS_NET:-/sys/class/net}
proc_net=${PROC_NET:-/proc/net}
fastpath=${FASTPATH:-auto}
ports=${NAT_PORT_RANGE:-}
interfaces=${INTERFACES:-}
failed=

log() { echo "novaedge-sysctls: $*"; }
problem() {
	echo "novaedge-sysctls: ERROR: $*" >&2
	failed=1
}

# devtype prints the DEVTYPE of interface $1 (vlan, bond, ...), empty for a
# plain device.
devtype() {
	while IFS='=' read -r key value; do
		if [ "$key" = DEVTYPE ]; then
			echo "$value"
			return
		fi
	done <"$sys_class_net/$1/uevent"
}

# leaves prints the devices XDP runs on for interface $2: a VLAN's parent, a
# bond's slaves, else the device itself. $1 is the depth, bounded as the agent
# bounds it. Problems go to stderr and make the status 1. Each lower device
# is resolved in a subshell, so the recursion keeps this call's variables.
leaves() {
	if [ ! -e "$sys_class_net/$2" ]; then
		echo "novaedge-sysctls: ERROR: interface $2 does not exist" >&2
		return 1
	fi
	if [ "$1" -gt 4 ]; then
		echo "novaedge-sysctls: ERROR: interface $2: devices stacked more than 4 deep" >&2
		return 1
	fi
	case $(devtype "$2") in
	vlan | bond)
		# Both name their lower devices lower_<name>: a VLAN its parent,
		# a bond its slaves.
		set +f
		set -- "$1" "$2" "$sys_class_net/$2"/lower_*
		set -f
		if [ ! -e "$3" ]; then
			echo "novaedge-sysctls: ERROR: interface $2 has no lower device (a bond without slaves?)" >&2
			return 1
		fi
		depth=$(($1 + 1)) rc=0
		shift 2
		for lower in "$@"; do
			(leaves "$depth" "${lower##*/lower_}") || rc=1
		done
		return "$rc"
		;;
	*)
		echo "$2"
		;;
	esac
}

# default_interfaces prints the interfaces of the best (lowest metric) IPv4
# default route, or of the best IPv6 one when there is no IPv4 default route.
default_interfaces() {
	best= best_metric=
	# Iface Destination Gateway Flags RefCnt Use Metric Mask ...; a route
	# without a device (unreachable, blackhole) shows "*".
	while read -r iface dst _gw _flags _ref _use metric mask _rest; do
		[ "$dst" = 00000000 ] && [ "$mask" = 00000000 ] && [ "$iface" != '*' ] || continue
		if [ -z "$best" ] || [ "$metric" -lt "$best_metric" ]; then
			best=$iface best_metric=$metric
		fi
	done <"$proc_net/route"
	if [ -n "$best" ]; then
		echo "$best"
		return
	fi
	# Destination, its prefix length, source, its prefix length, next hop,
	# metric, refcount, use, flags (all hex), device. A multipath route is
	# one line per nexthop, all with the same metric. RTF_REJECT (0x200)
	# marks unreachable routes.
	best= best_metric=
	while read -r dst plen _src _slen _nh metric _ref _use flags dev; do
		[ "$dst" = 00000000000000000000000000000000 ] && [ "$plen" = 00 ] && [ "$dev" != lo ] || continue
		[ $((0x$flags & 0x200)) -eq 0 ] || continue
		metric=$((0x$metric))
		if [ -z "$best_metric" ] || [ "$metric" -lt "$best_metric" ]; then
			best=$dev best_metric=$metric
		elif [ "$metric" -eq "$best_metric" ]; then
			best="$best $dev"
		fi
	done <"$proc_net/ipv6_route"
	echo "$best"
}

if [ -z "$interfaces" ]; then
	interfaces=$(default_interfaces)
	if [ -z "$interfaces" ]; then
		problem "no interface named and no IPv4 or IPv6 default route to pick one (set agent.interfaces)"
	else
		log "the default route's interfaces: $interfaces"
	fi
fi

# Interface names are split on spaces but never expanded as file patterns.
set -f
for requested in $interfaces; do
	devs=$(leaves 0 "$requested") || failed=1
	for dev in $devs; do
		path=$sysctl_net/ipv4/conf/$dev/accept_local
		if echo 1 >"$path"; then
			log "net.ipv4.conf.$dev.accept_local=1 (for $requested)"
		else
			problem "cannot write $path (is the host's /proc/sys/net mounted at $sysctl_net?)"
		fi
	done
done

if [ -n "$ports" ]; then
	path=$sysctl_net/ipv4/ip_local_reserved_ports
	# Not the shell's read: it reads a byte at a time, and this sysctl
	# answers a read at an offset with nothing.
	if ! reserved=$(cat "$path"); then
		problem "cannot read $path"
	fi
	# The agent checks for exactly this element before writing; the kernel
	# keeps the administrator's ranges and merges ours in.
	case ",$reserved," in
	*",$ports,"*)
		log "ports $ports are already reserved ($reserved)"
		;;
	*)
		if echo "${reserved:+$reserved,}$ports" >"$path"; then
			log "net.ipv4.ip_local_reserved_ports: added $ports"
		else
			problem "cannot reserve the SNAT ports $ports in $path"
		fi
		;;
	esac
fi

if [ -n "$failed" ]; then
	if [ "$fastpath" = on ]; then
		echo "novaedge-sysctls: the fast path cannot run as set up (agent.fastpath=on)" >&2
		exit 1
	fi
	echo "novaedge-sysctls: going on: the agent runs without the fast path where it cannot (agent.fastpath=auto)" >&2
fi
exit 0
