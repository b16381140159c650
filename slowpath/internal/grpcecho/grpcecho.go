// Package grpcecho is a bidirectional-streaming gRPC service for the slow
// path's tests (grpc-go's interop TestService): FullDuplexCall echoes every
// request's payload. Tests embed Duplex in a service of their own, or use
// it alone; the other methods answer Unimplemented.
package grpcecho

import (
	"errors"
	"io"

	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// Duplex implements FullDuplexCall by echoing.
type Duplex struct {
	testpb.UnimplementedTestServiceServer
}

// FullDuplexCall answers each request with its payload until the client
// ends its side.
func (Duplex) FullDuplexCall(s grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
	for {
		req, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.Send(&testpb.StreamingOutputCallResponse{Payload: req.GetPayload()}); err != nil {
			return err
		}
	}
}
