package agent

import (
	"fmt"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// OpsHandler serves the operations endpoints:
//
//	/healthz  200 while the process runs (liveness)
//	/readyz   200 once a configuration is in service, 503 before (readiness)
//	/metrics  Prometheus metrics
//	/debug/pprof/  Go profiles, when Options.Pprof is set
func (a *Agent) OpsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		s := a.State()
		if s == nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			msg := "not ready: no configuration applied yet"
			if r := a.Rejected(); r != nil {
				msg += ": " + r.Err.Error()
			}
			_, _ = fmt.Fprintln(w, msg)
			return
		}
		_, _ = fmt.Fprintf(w, "ready: version %d applied %s\n", s.Snapshot.GetVersion(), s.AppliedAt.UTC().Format(time.RFC3339))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.metrics.reg, promhttp.HandlerOpts{ErrorLog: nil}))
	if a.opts.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}
