package health

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

func TestConfigFromProto(t *testing.T) {
	tests := []struct {
		name string
		in   *pb.HealthCheck
		want Config
	}{
		{
			name: "HTTP defaults",
			in:   &pb.HealthCheck{Type: "HTTP"},
			want: Config{Type: TypeHTTP, Interval: 10 * time.Second, Timeout: 5 * time.Second,
				HealthyThreshold: 2, UnhealthyThreshold: 3, HTTPPath: "/"},
		},
		{
			name: "short interval caps the default timeout",
			in:   &pb.HealthCheck{Type: "tcp", IntervalMs: 1000},
			want: Config{Type: TypeTCP, Interval: time.Second, Timeout: time.Second,
				HealthyThreshold: 2, UnhealthyThreshold: 3},
		},
		{
			name: "everything set",
			in: &pb.HealthCheck{Type: "GRPC", IntervalMs: 3000, TimeoutMs: 500, HealthyThreshold: 1,
				UnhealthyThreshold: 5, Host: "api.example", GrpcService: "shop.Cart", Port: 9090},
			want: Config{Type: TypeGRPC, Interval: 3 * time.Second, Timeout: 500 * time.Millisecond,
				HealthyThreshold: 1, UnhealthyThreshold: 5, Host: "api.example", GRPCService: "shop.Cart", Port: 9090},
		},
		{
			name: "HTTP path and statuses",
			in:   &pb.HealthCheck{Type: "HTTP", HttpPath: "/healthz", ExpectedStatuses: []uint32{200, 204}},
			want: Config{Type: TypeHTTP, Interval: 10 * time.Second, Timeout: 5 * time.Second,
				HealthyThreshold: 2, UnhealthyThreshold: 3, HTTPPath: "/healthz", ExpectedStatuses: []int{200, 204}},
		},
		{
			name: "timeout equal to interval",
			in:   &pb.HealthCheck{Type: "TCP", IntervalMs: 2000, TimeoutMs: 2000},
			want: Config{Type: TypeTCP, Interval: 2 * time.Second, Timeout: 2 * time.Second,
				HealthyThreshold: 2, UnhealthyThreshold: 3},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ConfigFromProto(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Fatalf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestConfigFromProtoErrors(t *testing.T) {
	tests := []struct {
		name string
		in   *pb.HealthCheck
		want string
	}{
		{"nil", nil, "healthCheck: not set"},
		{"no type", &pb.HealthCheck{}, `healthCheck.type: "" is not HTTP, TCP or GRPC`},
		{"unknown type", &pb.HealthCheck{Type: "UDP"}, `healthCheck.type: "UDP"`},
		{"timeout over interval", &pb.HealthCheck{Type: "TCP", IntervalMs: 2000, TimeoutMs: 5000}, "healthCheck.timeout: 5s exceeds interval 2s"},
		{"default timeout over set interval", &pb.HealthCheck{Type: "TCP", TimeoutMs: 20000}, "healthCheck.timeout: 20s exceeds interval 10s"},
		{"port", &pb.HealthCheck{Type: "TCP", Port: 70000}, "healthCheck.port: 70000"},
		{"status", &pb.HealthCheck{Type: "HTTP", ExpectedStatuses: []uint32{200, 42}}, "healthCheck.expectedStatuses: 42"},
		{"path", &pb.HealthCheck{Type: "HTTP", HttpPath: "healthz"}, `healthCheck.httpPath: "healthz"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ConfigFromProto(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestOutlierConfigFromProto(t *testing.T) {
	tests := []struct {
		name string
		in   *pb.CircuitBreaker
		want OutlierConfig
	}{
		{"nil disables", nil, OutlierConfig{}},
		{
			name: "defaults",
			in:   &pb.CircuitBreaker{ConsecutiveFailures: 5},
			want: OutlierConfig{ConsecutiveFailures: 5, BaseEjectionTime: 30 * time.Second,
				MaxEjectionTime: 300 * time.Second, MaxEjectionPercent: 10},
		},
		{
			name: "set",
			in: &pb.CircuitBreaker{ConsecutiveFailures: 3, IntervalMs: 10_000, BaseEjectionTimeMs: 5000,
				MaxEjectionPercent: 50, MaxConnections: 7},
			want: OutlierConfig{ConsecutiveFailures: 3, Interval: 10 * time.Second, BaseEjectionTime: 5 * time.Second,
				MaxEjectionTime: 50 * time.Second, MaxEjectionPercent: 50},
		},
		{
			name: "percent above 100",
			in:   &pb.CircuitBreaker{ConsecutiveFailures: 1, MaxEjectionPercent: 150},
			want: OutlierConfig{ConsecutiveFailures: 1, BaseEjectionTime: 30 * time.Second,
				MaxEjectionTime: 300 * time.Second, MaxEjectionPercent: 100},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, OutlierConfigFromProto(tc.in)); d != "" {
				t.Fatalf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestResultForStatus(t *testing.T) {
	tests := []struct {
		code int
		want Result
	}{
		{200, Success}, {404, Success}, {429, Success}, {500, Failure5xx}, {501, Failure5xx},
		{502, GatewayError}, {503, GatewayError}, {504, GatewayError}, {599, Failure5xx},
	}
	for _, tc := range tests {
		t.Run(tc.want.String(), func(t *testing.T) {
			if got := ResultForStatus(tc.code); got != tc.want {
				t.Fatalf("ResultForStatus(%d) = %v, want %v", tc.code, got, tc.want)
			}
		})
	}
}
