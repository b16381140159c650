package helm_test

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

func (r *rendered) bfdDaemonSet(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	var ds appsv1.DaemonSet
	r.decode(t, "DaemonSet", "novaedge-bfd", &ds)
	return &ds
}

// TestBFDDaemon: by default novaedge-bfdd runs as its own DaemonSet, never
// restarted by an upgrade (OnDelete), in the host network, on the socket
// the agent is told, through the same host directory; bfd.daemon=false
// leaves the agent its embedded speaker.
func TestBFDDaemon(t *testing.T) {
	r := mustRender(t)
	ds := r.bfdDaemonSet(t)
	spec := &ds.Spec.Template.Spec
	if ds.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType {
		t.Errorf("update strategy %q, want OnDelete: a chart upgrade must not restart the BFD sessions", ds.Spec.UpdateStrategy.Type)
	}
	if !spec.HostNetwork {
		t.Error("novaedge-bfdd is not in the host network")
	}
	bfdc := container(t, spec, "bfd")
	if sock := arg(t, bfdc, "socket"); sock != "/run/novaedge/bfd.sock" {
		t.Errorf("--socket=%s", sock)
	}
	if o := arg(t, bfdc, "orphan-timeout"); o != "3m" {
		t.Errorf("--orphan-timeout=%s, want the default 3m", o)
	}
	hostPathMount(t, spec, bfdc, "/run/novaedge", "/run/novaedge", corev1.HostPathDirectoryOrCreate)
	sc := bfdc.SecurityContext
	if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.Capabilities == nil ||
		!slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_RAW"}) || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("bfd security context %+v: want unprivileged, ALL dropped, NET_RAW only", sc)
	}

	agentSpec := &r.daemonSet(t).Spec.Template.Spec
	agent := container(t, agentSpec, "agent")
	if sock := arg(t, agent, "bfd-socket"); sock != "/run/novaedge/bfd.sock" {
		t.Errorf("agent --bfd-socket=%s, want the daemon's socket", sock)
	}
	hostPathMount(t, agentSpec, agent, "/run/novaedge", "/run/novaedge", corev1.HostPathDirectoryOrCreate)
	if _, ok := args(t, agent)["frr-vty-dir"]; ok {
		t.Error("agent gets --frr-vty-dir without agent.frrVtyDir")
	}

	off := mustRender(t, "bfd.daemon=false", "bfd.orphanTimeout=90s")
	if _, ok := off.find("DaemonSet")["novaedge-bfd"]; ok {
		t.Error("bfd.daemon=false still renders novaedge-bfd")
	}
	if _, ok := args(t, container(t, &off.daemonSet(t).Spec.Template.Spec, "agent"))["bfd-socket"]; ok {
		t.Error("bfd.daemon=false: the agent still gets --bfd-socket")
	}
	if o := arg(t, container(t, &mustRender(t, "bfd.orphanTimeout=90s").bfdDaemonSet(t).Spec.Template.Spec, "bfd"), "orphan-timeout"); o != "90s" {
		t.Errorf("bfd.orphanTimeout=90s rendered --orphan-timeout=%s", o)
	}
}

// TestFRRVtyDir: agent.frrVtyDir mounts the host's FRR socket directory at
// the same path and points the agent's vtysh there.
func TestFRRVtyDir(t *testing.T) {
	spec := &mustRender(t, "agent.frrVtyDir=/var/run/frr").daemonSet(t).Spec.Template.Spec
	agent := container(t, spec, "agent")
	if d := arg(t, agent, "frr-vty-dir"); d != "/var/run/frr" {
		t.Errorf("--frr-vty-dir=%s", d)
	}
	hostPathMount(t, spec, agent, "/var/run/frr", "/var/run/frr", corev1.HostPathDirectory)
}
