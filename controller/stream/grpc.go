package stream

import (
	"crypto/tls"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
)

// MaxMessageSize bounds one message on the stream, in both directions. A
// snapshot with 10 000 HTTP routes encodes to about 1.4 MiB
// (TestLargeSnapshotRoundTrip measures it); 64 MiB leaves room for far larger
// route sets, many certificates and long endpoint lists, and still stops a
// runaway message before it exhausts memory.
const MaxMessageSize = 64 << 20

// Transport keepalive: HTTP/2 pings find a peer that vanished without closing
// its connection (a node that lost power, a cut link). The client pings less
// often than the server allows, or the server would close the connection for
// "too many pings".
const (
	serverPingInterval = 30 * time.Second
	clientPingInterval = 30 * time.Second
	pingTimeout        = 10 * time.Second
	minClientPingGap   = 15 * time.Second
)

// GRPCServerOptions returns the options of a gRPC server that serves the
// stream: TLS with tlsConfig (it should require and verify client
// certificates), message sizes up to MaxMessageSize and keepalive. A nil
// tlsConfig serves without transport security, for tests only.
func GRPCServerOptions(tlsConfig *tls.Config) []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageSize),
		grpc.MaxSendMsgSize(MaxMessageSize),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: serverPingInterval, Timeout: pingTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: minClientPingGap, PermitWithoutStream: true}),
		grpc.ForceServerCodecV2(newSharedCodec()),
	}
	if tlsConfig != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsConfig)))
	}
	return opts
}

// DialOptions returns the client options that match GRPCServerOptions: TLS
// with tlsConfig (its ServerName, when set, is the name the controller's
// certificate must carry), the same message size limit, and keepalive pings
// the server accepts. A nil tlsConfig connects without transport security,
// for tests only.
func DialOptions(tlsConfig *tls.Config) []grpc.DialOption {
	creds := insecure.NewCredentials()
	if tlsConfig != nil {
		creds = credentials.NewTLS(tlsConfig)
	}
	return []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageSize), grpc.MaxCallSendMsgSize(MaxMessageSize),
			grpc.ForceCodecV2(newReuseCodec())),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: clientPingInterval, Timeout: pingTimeout, PermitWithoutStream: true}),
	}
}
