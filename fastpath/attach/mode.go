package attach

import (
	"fmt"
	"strings"

	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink/nl"
)

// Mode is the XDP attach mode: what the agent asks for (--xdp-mode) and what
// ends up in effect on an interface.
type Mode int

const (
	// ModeAuto asks for native mode and falls back to generic mode when the
	// driver refuses native XDP. As a mode in effect it means none: the
	// program is not attached.
	ModeAuto Mode = iota
	// ModeNative runs the program in the driver (XDP_FLAGS_DRV_MODE), before
	// an skb is allocated.
	ModeNative
	// ModeGeneric runs the program in the core network stack after the skb
	// is built (XDP_FLAGS_SKB_MODE): slower, but works on every device.
	ModeGeneric
)

// String returns the name used by --xdp-mode and in status output.
func (m Mode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeNative:
		return "native"
	case ModeGeneric:
		return "generic"
	default:
		return fmt.Sprintf("mode(%d)", int(m))
	}
}

// ParseMode parses "auto", "native" or "generic" (case-insensitive); the
// kernel's own names "drv" and "skb" are accepted too.
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "auto":
		return ModeAuto, nil
	case "native", "drv", "driver":
		return ModeNative, nil
	case "generic", "skb":
		return ModeGeneric, nil
	default:
		return ModeAuto, fmt.Errorf("unknown xdp mode %q: want auto, native or generic", s)
	}
}

// MarshalText implements encoding.TextMarshaler, so a Mode can be a flag
// (flag.TextVar) or a config field.
func (m Mode) MarshalText() ([]byte, error) {
	switch m {
	case ModeAuto, ModeNative, ModeGeneric:
		return []byte(m.String()), nil
	default:
		return nil, fmt.Errorf("invalid xdp mode %d", int(m))
	}
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseMode.
func (m *Mode) UnmarshalText(text []byte) error {
	parsed, err := ParseMode(string(text))
	if err != nil {
		return err
	}
	*m = parsed
	return nil
}

// flags returns the link attach flags for an explicit mode.
func (m Mode) flags() link.XDPAttachFlags {
	switch m {
	case ModeNative:
		return link.XDPDriverMode
	case ModeGeneric:
		return link.XDPGenericMode
	default:
		return 0
	}
}

// modeFromAttached maps netlink's IFLA_XDP_ATTACHED value to a Mode.
// Offloaded (HW) and multi-program attachments are never made by this
// package; they map to ModeAuto, "not ours to describe".
func modeFromAttached(v uint32) Mode {
	switch v {
	case nl.XDP_ATTACHED_DRV:
		return ModeNative
	case nl.XDP_ATTACHED_SKB:
		return ModeGeneric
	default:
		return ModeAuto
	}
}
