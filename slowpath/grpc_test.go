package slowpath

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/novaedge/novaedge/slowpath/internal/grpcecho"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// testService implements the four kinds of gRPC calls of grpc-go's
// interop TestService.
type testService struct {
	grpcecho.Duplex // FullDuplexCall
}

func (testService) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if req.GetResponseStatus().GetCode() != 0 {
		return nil, status.Error(codes.Code(req.GetResponseStatus().GetCode()), req.GetResponseStatus().GetMessage())
	}
	_ = grpc.SetTrailer(ctx, metadata.Pairs("x-trailer", "unary"))
	return &testpb.SimpleResponse{Payload: &testpb.Payload{Body: append([]byte("echo:"), req.GetPayload().GetBody()...)}}, nil
}

func (testService) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	for _, p := range req.GetResponseParameters() {
		if err := s.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: make([]byte, p.GetSize())}}); err != nil {
			return err
		}
	}
	s.SetTrailer(metadata.Pairs("x-trailer", "server-stream"))
	return nil
}

func (testService) StreamingInputCall(s grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]) error {
	total := 0
	for {
		req, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return s.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: int32(total)})
		}
		if err != nil {
			return err
		}
		total += len(req.GetPayload().GetBody())
	}
}

// TestGRPCThroughTheProxy: unary, server-, client- and bidi-streaming
// calls and the health service pass through an HTTP listener (h2c) to a
// gRPC backend, with trailers and backend error statuses intact.
func TestGRPCThroughTheProxy(t *testing.T) {
	e := newEnv(t)
	gs := grpc.NewServer()
	testpb.RegisterTestServiceServer(gs, testService{})
	hs := health.NewServer()
	hs.SetServingStatus("svc", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	bl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(bl) }()
	defer gs.Stop()
	b := backendOf("ns/grpc", bl.Addr().String())
	b.Protocol = "GRPC"
	e.mustApply(e.snap(pb.Protocol_PROTOCOL_HTTP, nil, []*pb.Route{route("ns/r", rule(prefix("/"), "ns/grpc"))}, []*pb.Backend{b}))

	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	c := testpb.NewTestServiceClient(conn)
	ctx := context.Background()

	var trailer metadata.MD
	resp, err := c.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("hi")}}, grpc.Trailer(&trailer))
	if err != nil || string(resp.GetPayload().GetBody()) != "echo:hi" || trailer.Get("x-trailer")[0] != "unary" {
		t.Fatalf("unary: %v %v trailer %v", resp, err, trailer)
	}
	_, err = c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseStatus: &testpb.EchoStatus{Code: int32(codes.NotFound), Message: "no such thing"}})
	if st, _ := status.FromError(err); st.Code() != codes.NotFound || st.Message() != "no such thing" {
		t.Fatalf("backend error status: %v", err)
	}

	ss, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{Size: 10}, {Size: 20000}, {Size: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int
	for {
		m, err := ss.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("server stream: %v", err)
		}
		sizes = append(sizes, len(m.GetPayload().GetBody()))
	}
	if len(sizes) != 3 || sizes[1] != 20000 || ss.Trailer().Get("x-trailer")[0] != "server-stream" {
		t.Fatalf("server stream: sizes %v trailer %v", sizes, ss.Trailer())
	}

	cs, err := c.StreamingInputCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{5, 50000, 7} {
		if err := cs.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: make([]byte, n)}}); err != nil {
			t.Fatal(err)
		}
	}
	agg, err := cs.CloseAndRecv()
	if err != nil || agg.GetAggregatedPayloadSize() != 50012 {
		t.Fatalf("client stream: %v %v", agg, err)
	}

	bidi, err := c.FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, msg := range []string{"one", "two", "three"} {
		if err := bidi.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte(msg)}}); err != nil {
			t.Fatal(err)
		}
		got, err := bidi.Recv()
		if err != nil || string(got.GetPayload().GetBody()) != msg {
			t.Fatalf("bidi %s: %v %v", msg, got, err)
		}
	}
	_ = bidi.CloseSend()
	if _, err := bidi.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("bidi end: %v", err)
	}

	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "svc"})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", h, err)
	}

	// An unrouted call is a gRPC UNIMPLEMENTED, not an HTTP 404 page.
	e.mustApply(func() *pb.ConfigSnapshot {
		s := e.snap(pb.Protocol_PROTOCOL_HTTP, nil, []*pb.Route{route("ns/r", rule(prefix("/grpc.health.v1.Health/"), "ns/grpc"))}, []*pb.Backend{b})
		s.Version = 2
		return s
	}())
	_, err = c.EmptyCall(ctx, &testpb.Empty{})
	if st, _ := status.FromError(err); st.Code() != codes.Unimplemented {
		t.Fatalf("unrouted call: %v, want Unimplemented", err)
	}
}
