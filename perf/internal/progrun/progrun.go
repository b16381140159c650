// Package progrun runs a BPF program with BPF_PROG_TEST_RUN and returns the
// duration the kernel measured, which cilium/ebpf's Program.Run does not
// return (and Program.Benchmark takes no context, such as the ingress
// interface an XDP program's FIB lookup needs). It is the one place the
// benchmarks make the bpf(2) system call themselves, as the repository's
// lint rules require.
package progrun

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// attr is the BPF_PROG_TEST_RUN part of union bpf_attr.
type attr struct {
	progFd, retval          uint32
	dataSizeIn, dataSizeOut uint32
	dataIn, dataOut         uint64
	repeat, duration        uint32
	ctxSizeIn, ctxSizeOut   uint32
	ctxIn, ctxOut           uint64
	flags, cpu, batchSize   uint32
	_                       uint32
}

// Run runs the program with file descriptor fd repeat times on data with
// the context ctx (both non-empty) and returns its verdict and the
// kernel's mean time per run in nanoseconds. A run interrupted by a signal
// is made again.
func Run(fd int, data, ctx []byte, repeat uint32) (verdict uint32, ns uint32, err error) {
	if len(data) == 0 || len(ctx) == 0 {
		return 0, 0, errors.New("progrun: data and context must not be empty")
	}
	for {
		a := attr{
			progFd: uint32(fd), dataSizeIn: uint32(len(data)), dataIn: uint64(uintptr(unsafe.Pointer(&data[0]))),
			repeat: repeat, ctxSizeIn: uint32(len(ctx)), ctxIn: uint64(uintptr(unsafe.Pointer(&ctx[0]))),
		}
		_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_TEST_RUN, uintptr(unsafe.Pointer(&a)), unsafe.Sizeof(a))
		runtime.KeepAlive(data)
		runtime.KeepAlive(ctx)
		switch errno {
		case 0:
			return a.retval, a.duration, nil
		case unix.EINTR:
			continue
		default:
			return 0, 0, fmt.Errorf("BPF_PROG_TEST_RUN: %w", errno)
		}
	}
}
