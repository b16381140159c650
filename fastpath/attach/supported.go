package attach

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Supported checks that this host can run the package: a BPF filesystem is
// (or can be) mounted at /sys/fs/bpf, mounting it if needed, and the kernel
// attaches XDP programs through BPF links (Linux 5.9 or later). The probe
// attaches a program that passes every packet to the loopback device of a
// network namespace made for the purpose, so no interface of the host is
// touched; without the right to make one (CAP_SYS_ADMIN, which the agent's
// pod does not have), to the host's loopback for a moment.
func Supported() error {
	if err := ensureBPFFS(bpffsMountPoint); err != nil {
		return fmt.Errorf("bpf filesystem: %w", err)
	}
	if err := probeXDPLink(); err != nil {
		return fmt.Errorf("xdp bpf links unsupported (need Linux 5.9 or later and CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN): %w", err)
	}
	return nil
}

func probeXDPLink() error {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "novaedge_probe",
		Type: ebpf.XDP,
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, 2), // XDP_PASS
			asm.Return(),
		},
		License: "Dual BSD/GPL",
	})
	if err != nil {
		return fmt.Errorf("load xdp probe program: %w", err)
	}
	defer func() { _ = prog.Close() }()

	done := make(chan error, 1)
	go func() {
		// Never unlocked: the thread leaves the host namespace, so it must
		// end with this goroutine rather than return to the scheduler.
		runtime.LockOSThread()
		done <- probeInNewNetns(prog)
	}()
	err = <-done
	if errors.Is(err, errNoProbeNetns) {
		// No CAP_SYS_ADMIN (an unprivileged pod): probe on the host's
		// loopback instead. An XDP_PASS program changes nothing for the
		// moment it is attached in generic mode.
		return probeOn("lo", prog)
	}
	return err
}

// errNoProbeNetns: the probe could not get a namespace of its own.
var errNoProbeNetns = errors.New("cannot create a network namespace for the probe")

func probeOn(ifname string, prog *ebpf.Program) error {
	dev, err := netlink.LinkByName(ifname)
	if err != nil {
		return fmt.Errorf("find %s for the xdp probe: %w", ifname, err)
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: dev.Attrs().Index, Flags: link.XDPGenericMode})
	if err != nil {
		return fmt.Errorf("attach probe program: %w", err)
	}
	return l.Close()
}

func probeInNewNetns(prog *ebpf.Program) error {
	ns, err := netns.New()
	if err != nil {
		return fmt.Errorf("%w: %w", errNoProbeNetns, err)
	}
	defer func() { _ = ns.Close() }()
	return probeOn("lo", prog)
}
