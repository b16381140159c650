// Package baseproxy holds the Go baselines perf/httpbench measures NovaEdge's
// slow path against: measuring sticks, not proxies anyone should run. Each
// forwards small keep-alive HTTP/1.1 requests over pooled backend
// connections, and each adds one thing to the one before, so that the rates
// between them say what each thing costs on this machine:
//
//   - Serve: one thread, one epoll loop, heads forwarded unchanged (the
//     way HAProxy and nginx are built; the ceiling of a Go proxy);
//   - ServeGoroutines: the same with a goroutine per connection, the
//     ordinary Go design NovaEdge uses;
//   - ServeLean: that, plus the HTTP work NovaEdge cannot skip, done on
//     header fields kept as the bytes they were read into rather than in
//     http.Request and http.Header.
package baseproxy
