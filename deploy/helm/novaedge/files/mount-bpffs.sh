#!/bin/sh
# mount-bpffs.sh runs in the agent pod's "mount-bpffs" init container
# (agent.mountBPFFS): it mounts the BPF filesystem on the host's /sys/fs/bpf
# unless one is mounted there already. The pod mounts the host's /sys/fs/bpf
# at the same place with Bidirectional propagation, so the new mount appears
# on the host, where the agent's pins then outlive the pod.
set -eu

bpffs=${BPFFS:-/sys/fs/bpf}
mounts=${MOUNTS:-/proc/self/mounts}

while read -r _ dir fstype _; do
	if [ "$dir" = "$bpffs" ] && [ "$fstype" = bpf ]; then
		echo "novaedge-mount-bpffs: $bpffs is a bpffs already"
		exit 0
	fi
done <"$mounts"
echo "novaedge-mount-bpffs: mounting a bpffs on $bpffs"
mount -t bpf bpf "$bpffs"
