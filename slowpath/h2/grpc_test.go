package h2

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/novaedge/novaedge/slowpath/internal/grpcecho"
	"google.golang.org/grpc/status"
)

// TestGRPC mounts grpc-go's server as the Handler (its ServeHTTP) and
// drives it with grpc-go's client: unary health checks (including an
// error status, sent trailers-only), a server stream (health Watch) and a
// bidirectional stream.
func TestGRPC(t *testing.T) {
	forBoth(t, func(t *testing.T, useTLS bool) {
		gs := grpc.NewServer()
		hs := health.NewServer()
		healthpb.RegisterHealthServer(gs, hs)
		testpb.RegisterTestServiceServer(gs, grpcecho.Duplex{})
		hs.SetServingStatus("svc", healthpb.HealthCheckResponse_SERVING)
		ts := startServer(t, useTLS, gs, nil)
		creds := insecure.NewCredentials()
		if useTLS {
			creds = credentials.NewTLS(&tls.Config{RootCAs: ts.ca.Pool(), ServerName: "h2.test"})
		}
		cc, err := grpc.NewClient("passthrough:///"+ts.addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cc.Close() }()
		hc := healthpb.NewHealthClient(cc)
		ctx := t.Context()

		res, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "svc"})
		if err != nil || res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("Check(svc) = %v, %v; want SERVING", res, err)
		}
		_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "unknown"})
		if status.Code(err) != codes.NotFound {
			t.Fatalf("Check(unknown): %v, want NotFound", err)
		}

		w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: "svc"})
		if err != nil {
			t.Fatal(err)
		}
		if r, err := w.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("Watch first: %v, %v; want SERVING", r, err)
		}
		hs.SetServingStatus("svc", healthpb.HealthCheckResponse_NOT_SERVING)
		if r, err := w.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("Watch after change: %v, %v; want NOT_SERVING", r, err)
		}

		bidi, err := testpb.NewTestServiceClient(cc).FullDuplexCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			body := []byte(fmt.Sprintf("message %d", i))
			if err := bidi.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: body}}); err != nil {
				t.Fatalf("send %d: %v", i, err)
			}
			r, err := bidi.Recv()
			if err != nil || string(r.GetPayload().GetBody()) != string(body) {
				t.Fatalf("echo %d: %v, %v; want %q", i, r, err, body)
			}
		}
		if err := bidi.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if _, err := bidi.Recv(); !errors.Is(err, io.EOF) {
			t.Fatalf("after CloseSend: %v, want io.EOF (status OK)", err)
		}
	})
}
