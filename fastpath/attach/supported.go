package attach

import (
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
// touched.
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
	return <-done
}

func probeInNewNetns(prog *ebpf.Program) error {
	ns, err := netns.New()
	if err != nil {
		return fmt.Errorf("create probe network namespace: %w", err)
	}
	defer func() { _ = ns.Close() }()
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("find lo in probe namespace: %w", err)
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: lo.Attrs().Index, Flags: link.XDPGenericMode})
	if err != nil {
		return fmt.Errorf("attach probe program: %w", err)
	}
	return l.Close()
}
