package health

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/slowpath/endpoint"
)

// Probe types of Config.Type.
const (
	TypeHTTP = "HTTP"
	TypeTCP  = "TCP"
	TypeGRPC = "GRPC"
)

// Defaults applied to zero fields of a Config (ConfigFromProto and
// NewChecker alike). Envoy has no defaults for interval and timeout; these
// follow the ProxyBackend API's documented ones.
const (
	DefaultInterval           = 10 * time.Second
	DefaultTimeout            = 5 * time.Second // capped at the interval
	DefaultHealthyThreshold   = 2
	DefaultUnhealthyThreshold = 3
	DefaultHTTPPath           = "/"
)

// MaxJitter is the largest fraction of the interval added at random to each
// wait between probes, so that endpoints added together (thousands at
// start-up) spread out instead of probing in lockstep.
const MaxJitter = 0.1

// UserAgent is sent by HTTP and gRPC probes, so backends can tell probes from
// traffic in their logs.
const UserAgent = "NovaEdge-HealthCheck"

// Config is the compiled form of a pb.HealthCheck.
type Config struct {
	// Type is TypeHTTP, TypeTCP or TypeGRPC. Any other value makes every
	// probe fail (ConfigFromProto rejects it).
	Type string
	// Interval between the end of one probe and the start of the next, plus
	// up to MaxJitter of it. Zero means DefaultInterval.
	Interval time.Duration
	// Timeout of one probe (connect, request and response). Zero means
	// DefaultTimeout or Interval, whichever is shorter.
	Timeout time.Duration
	// HealthyThreshold is the number of consecutive successes that make an
	// unhealthy endpoint healthy. Zero means DefaultHealthyThreshold.
	HealthyThreshold int
	// UnhealthyThreshold is the number of consecutive failures that make a
	// healthy endpoint unhealthy. Zero means DefaultUnhealthyThreshold.
	UnhealthyThreshold int
	// HTTPPath is the path (and optional query) HTTP probes GET. Empty means
	// DefaultHTTPPath.
	HTTPPath string
	// Host is the Host header of HTTP probes and the :authority of gRPC
	// probes; with TLS and an empty TLS.ServerName it is also the SNI name
	// and the name verified. Empty means the probed address.
	Host string
	// ExpectedStatuses are the HTTP statuses that count as healthy. Empty
	// means 200-399 (redirects are not followed).
	ExpectedStatuses []int
	// GRPCService is the service name sent in grpc.health.v1 Check. Empty
	// means the server as a whole.
	GRPCService string
	// Port, when not zero, is probed instead of the endpoint's port.
	Port uint32
	// TLS, when set, makes HTTP probes use HTTPS and gRPC probes TLS; nil
	// means plaintext. It is cloned, never modified.
	TLS *tls.Config
	// H2C makes plaintext HTTP probes speak HTTP/2 with prior knowledge.
	// gRPC probes without TLS always use h2c; it does not apply to them.
	H2C bool
}

// ConfigFromProto compiles and validates a backend's health check. Zero
// fields take the defaults above. It fails when hc is nil, the type is not
// HTTP, TCP or GRPC (any case), the timeout exceeds the interval, the port
// or an expected status is out of range, or the HTTP path does not start
// with "/"; each error names the field.
func ConfigFromProto(hc *pb.HealthCheck) (Config, error) {
	if hc == nil {
		return Config{}, errors.New("healthCheck: not set")
	}
	cfg := Config{
		Type:               strings.ToUpper(hc.GetType()),
		Interval:           time.Duration(hc.GetIntervalMs()) * time.Millisecond,
		Timeout:            time.Duration(hc.GetTimeoutMs()) * time.Millisecond,
		HealthyThreshold:   int(hc.GetHealthyThreshold()),
		UnhealthyThreshold: int(hc.GetUnhealthyThreshold()),
		HTTPPath:           hc.GetHttpPath(),
		Host:               hc.GetHost(),
		GRPCService:        hc.GetGrpcService(),
		Port:               hc.GetPort(),
	}
	switch cfg.Type {
	case TypeHTTP, TypeTCP, TypeGRPC:
	default:
		return Config{}, fmt.Errorf("healthCheck.type: %q is not HTTP, TCP or GRPC", hc.GetType())
	}
	for _, s := range hc.GetExpectedStatuses() {
		if s < 100 || s > 599 {
			return Config{}, fmt.Errorf("healthCheck.expectedStatuses: %d is not an HTTP status", s)
		}
		cfg.ExpectedStatuses = append(cfg.ExpectedStatuses, int(s))
	}
	if cfg.Port > 65535 {
		return Config{}, fmt.Errorf("healthCheck.port: %d is not a port", cfg.Port)
	}
	if cfg.Type == TypeHTTP && cfg.HTTPPath != "" && !strings.HasPrefix(cfg.HTTPPath, "/") {
		return Config{}, fmt.Errorf("healthCheck.httpPath: %q does not start with \"/\"", cfg.HTTPPath)
	}
	cfg = cfg.withDefaults()
	if cfg.Timeout > cfg.Interval {
		return Config{}, fmt.Errorf("healthCheck.timeout: %s exceeds interval %s", cfg.Timeout, cfg.Interval)
	}
	return cfg, nil
}

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.Timeout <= 0 {
		c.Timeout = min(DefaultTimeout, c.Interval)
	}
	if c.HealthyThreshold <= 0 {
		c.HealthyThreshold = DefaultHealthyThreshold
	}
	if c.UnhealthyThreshold <= 0 {
		c.UnhealthyThreshold = DefaultUnhealthyThreshold
	}
	if c.Type == TypeHTTP && c.HTTPPath == "" {
		c.HTTPPath = DefaultHTTPPath
	}
	return c
}

// Options are the collaborators of a Checker or an Outlier.
type Options struct {
	// Clock is the time source. Nil means SystemClock.
	Clock Clock
	// Logger receives verdict changes (info) and probe failures (debug).
	// Nil means no logging.
	Logger *slog.Logger
	// OnChange, if not nil, is called after an endpoint's verdict changes
	// (active health, or ejection and its end), for metrics and events. It
	// may be called from several goroutines at once and must not call back
	// into the Checker or Outlier that called it.
	OnChange func(ep *endpoint.Endpoint, healthy bool, reason string)
	// Rand returns a number in [0, 1) that scales the jitter of probe
	// intervals; it must be safe for concurrent use. Nil means
	// math/rand/v2.Float64.
	Rand func() float64

	// probe replaces the real probes in tests.
	probe func(ctx context.Context, cfg Config, addr string) error
}

func (o Options) clock() Clock {
	if o.Clock == nil {
		return SystemClock{}
	}
	return o.Clock
}

func (o Options) logger() *slog.Logger {
	if o.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Logger
}
