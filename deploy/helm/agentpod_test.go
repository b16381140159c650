package helm_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestAgentRunsAsTheChartRunsIt starts the real agent the way the chart's
// pod runs it, in a network namespace standing in for the node: the host's
// bpffs at /sys/fs/bpf, /proc/sys read-only, the sysctls init script run
// first (uid 0, no capability, through /proc/sys/net mounted elsewhere), then
// the agent as uid 0 holding exactly the capabilities the rendered DaemonSet
// adds, with the fast path on (so it fails rather than falling back). The
// agent serves deploy/examples/fastpath-demo.yaml: a Local VIP bound on lo, a
// TCP listener on port 80 and the XDP program on the node's interface.
func TestAgentRunsAsTheChartRunsIt(t *testing.T) {
	needRoot(t, "ip", "unshare", "setpriv", "mount")
	root := repoRoot(t)

	agent := container(t, &mustRender(t).daemonSet(t).Spec.Template.Spec, "agent")
	caps := "-all"
	for _, c := range agent.SecurityContext.Capabilities.Add {
		caps += ",+" + strings.ToLower(string(c))
	}

	dir := t.TempDir()
	bin := filepath.Join(dir, "novaedge-agent")
	build := exec.Command("go", "build", "-o", bin, "./cmd/novaedge-agent")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/novaedge-agent: %v\n%s", err, out)
	}

	ns := netns(t)
	inNetns(t, ns, "ip", "link", "set", "lo", "up")
	inNetns(t, ns, "ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1")
	inNetns(t, ns, "ip", "link", "set", "v0", "up")
	inNetns(t, ns, "ip", "link", "set", "v1", "up")
	inNetns(t, ns, "ip", "addr", "add", "10.97.1.1/24", "dev", "v0")

	// The private mount namespace ends with the wrapper, and with it the
	// bpffs holding the pins; deleting the network namespace detaches XDP
	// and removes the VIP.
	wrapper := `set -u
dir=$1 caps=$2 agent=$3 script=$4 config=$5
mkdir -p "$dir/net" "$dir/state" "$dir/run"
mount -t bpf bpf /sys/fs/bpf
mount --bind /proc/sys/net "$dir/net"
mount --bind /proc/sys /proc/sys
mount -o remount,bind,ro /proc/sys
SYSCTL_NET="$dir/net" INTERFACES=v0 FASTPATH=on NAT_PORT_RANGE=10000-32767 \
	setpriv --bounding-set=-all --inh-caps=-all -- sh "$script" || exit 90
setpriv --bounding-set="$caps" --inh-caps=-all -- "$agent" --standalone --config "$config" \
	--fastpath=on --xdp-mode=generic --interface=v0 --bpf-root=/sys/fs/bpf/novaedge \
	--state-dir="$dir/state" --admin-socket="$dir/run/agent.sock" --handoff-socket= \
	--metrics-addr=127.0.0.1:19090 >"$dir/agent.log" 2>&1 &
pid=$!
# Wait for the first configuration to be applied, or for the agent to exit;
# the bound is a deadline for a stuck agent, not a performance threshold.
i=0
while [ $i -lt 1200 ]; do
	if grep -q 'msg="configuration applied"' "$dir/agent.log"; then
		kill $pid
		wait $pid
		exit 0
	fi
	kill -0 $pid 2>/dev/null || { wait $pid; exit 91; }
	sleep 0.1
	i=$((i + 1))
done
kill $pid
exit 92`
	cmd := exec.Command("ip", "netns", "exec", ns, "unshare", "--mount", "--propagation", "private", "--",
		"sh", "-c", wrapper, "wrapper", dir, caps, bin, scriptPath(t, "sysctls.sh"),
		filepath.Join(root, "deploy", "examples", "fastpath-demo.yaml"))
	out, err := cmd.CombinedOutput()
	log, _ := os.ReadFile(filepath.Join(dir, "agent.log"))
	if err != nil {
		what := map[int]string{90: "the sysctls init script failed", 91: "the agent exited", 92: "the agent applied no configuration within two minutes"}
		code := -1
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		}
		t.Fatalf("the agent does not run with the chart's capabilities (%s) and a read-only /proc/sys: %s (%v)\nwrapper output:\n%s\nagent log:\n%s",
			caps, what[code], err, out, log)
	}
	for _, want := range []string{`msg="fast path attached"`, `msg="vip address bound"`, `msg="listener open"`} {
		if !strings.Contains(string(log), want) {
			t.Errorf("the agent's log lacks %s:\n%s", want, log)
		}
	}
	if strings.Contains(string(log), "level=ERROR") {
		t.Errorf("the agent logged errors:\n%s", log)
	}
}
