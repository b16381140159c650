package slowpath

import (
	"net"
	"net/http"

	"github.com/novaedge/novaedge/slowpath/h2conform"
)

// conformHTTP2 puts srv's HTTP/2 behind the h2conform layer, which makes
// it pass h2spec --strict (see that package), and returns the listener to
// serve. Should the layer fail to install, srv serves HTTP/2 with
// net/http's own server, as it would without it, and the error is logged.
//
// StrictPreface: a plaintext connection whose first line is neither an
// HTTP/1.x request line nor the HTTP/2 preface is closed without an
// answer rather than answered 400, because on a port that also speaks
// HTTP/2 with prior knowledge it is an invalid preface (h2spec
// http2/3.5/2).
func (p *Proxy) conformHTTP2(srv *http.Server, ln net.Listener) net.Listener {
	cl, err := h2conform.Configure(srv, ln, h2conform.Options{StrictPreface: true})
	if err != nil {
		p.log.Error("http/2 conformance layer not installed", "error", err)
		return ln
	}
	return cl
}
