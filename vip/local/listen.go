package local

import (
	"context"
	"net"

	"github.com/novaedge/novaedge/vip/local/internal/linux"
)

// ListenConfig returns a net.ListenConfig whose TCP and UDP sockets set
// IP_FREEBIND (IPv4) or IPV6_FREEBIND (IPv6), so that a listener can bind a
// VIP before the address is bound on the host: the agent can start its
// listeners and bind addresses in either order. SO_REUSEADDR is already set
// by Go on TCP listeners; SO_REUSEPORT is deliberately not set, so that a
// second agent on the same VIP and port fails instead of silently sharing it.
func ListenConfig() net.ListenConfig {
	return net.ListenConfig{Control: linux.Freebind}
}

// Listen is ListenConfig().Listen.
func Listen(ctx context.Context, network, address string) (net.Listener, error) {
	lc := ListenConfig()
	return lc.Listen(ctx, network, address)
}

// ListenPacket is ListenConfig().ListenPacket.
func ListenPacket(ctx context.Context, network, address string) (net.PacketConn, error) {
	lc := ListenConfig()
	return lc.ListenPacket(ctx, network, address)
}
