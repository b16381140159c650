package slowpath

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/novaedge/novaedge/slowpath/upstream"
)

// serveDirect forwards a request that does not upgrade the connection:
// what httputil.ReverseProxy does for it, without the copies it makes. The
// upstream request reuses the exchange's header map and URL, and the
// response header's values are shared, not copied.
func (x *exchange) serveDirect(w http.ResponseWriter, r *http.Request) {
	x.w = w
	var out *http.Request
	if _, own := x.be.transport.(*upstream.Transport); own {
		// The own client hands 1xx responses to x.got1xx directly (see
		// RoundTrip), so the upstream request keeps the client's context
		// and is a copy kept in the exchange: no context, no allocation.
		x.outReq = *r
		out = &x.outReq
	} else {
		out = r.WithContext(httptrace.WithClientTrace(r.Context(), &x.trace))
	}
	out.RequestURI = ""
	out.Close = false
	if r.ContentLength == 0 {
		out.Body = nil // a retry need not replay it
	}
	x.outURL = *r.URL
	out.URL = &x.outURL
	out.Header = copyEndToEnd(x.outHeader, r.Header)
	x.outHeader = out.Header
	if httpguts.HeaderValuesContainsToken(r.Header["Te"], "trailers") {
		// gRPC needs it; it is the one TE value a proxy passes on.
		out.Header["Te"] = teTrailers
	}
	x.rewriteOut(r, out)

	resp, err := x.RoundTrip(out)
	if err != nil {
		x.errorHandler(w, r, err)
		return
	}
	if _, _, fields := x.scratch.Fields(); fields {
		// The raw path passes the fields on as they are, unless the
		// response needs the header map after all.
		if !x.rawFields || !x.responseFields(x.sw.ResponseWriter) {
			resp.Header = x.scratch.BuildHeader()
		}
	}
	_ = x.modifyResponse(resp)
	dst := w.Header()
	addEndToEnd(dst, resp.Header)
	announced := len(resp.Trailer)
	if announced > 0 {
		keys := make([]string, 0, announced)
		for k := range resp.Trailer {
			keys = append(keys, k)
		}
		dst["Trailer"] = []string{strings.Join(keys, ", ")}
	}
	w.WriteHeader(resp.StatusCode)
	if announced > 0 {
		// Trailers need a chunked (or HTTP/2) body: start it now.
		_ = http.NewResponseController(w).Flush()
	}
	if err := x.copyBody(w, resp); err != nil {
		_ = resp.Body.Close()
		if !errors.Is(err, errClientWrite) && r.Context().Err() == nil {
			x.p.log.Warn("upstream response body failed", "route", x.m.Rule.Route, "backend", x.be.name, "request_id", x.reqID, "error", err)
		}
		// The client must see the response end short, not complete.
		panic(http.ErrAbortHandler)
	}
	_ = resp.Body.Close()
	if len(resp.Trailer) == announced {
		for k, vs := range resp.Trailer {
			dst[k] = vs
		}
		return
	}
	for k, vs := range resp.Trailer {
		dst[http.TrailerPrefix+k] = vs
	}
}

var (
	teTrailers     = []string{"trailers"}
	errClientWrite = errors.New("write to client failed")
)

// copyBody copies the response body to the client, flushing after each
// read when the body streams (no length, or server-sent events), as
// ReverseProxy does.
func (x *exchange) copyBody(w http.ResponseWriter, resp *http.Response) error {
	flush := resp.ContentLength < 0 || strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	rc := http.NewResponseController(w)
	buf := bufPool.Get()
	defer bufPool.Put(buf)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				return errClientWrite
			}
			if flush {
				if err := rc.Flush(); err != nil {
					return errClientWrite
				}
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			if errors.Is(rerr, context.Canceled) {
				return errClientWrite
			}
			return rerr
		}
	}
}

// got1xx passes an informational response (100 Continue, 103 Early
// Hints) on to the client, as ReverseProxy does.
func (x *exchange) got1xx(code int, header textproto.MIMEHeader) error {
	h := x.w.Header()
	for k, vs := range header {
		h[k] = vs
	}
	x.w.WriteHeader(code)
	clear(h)
	return nil
}

// copyEndToEnd fills dst (cleared; nil: a new map) with the fields of src
// that are end-to-end: neither hop-by-hop nor named by Connection.
func copyEndToEnd(dst, src http.Header) http.Header {
	if dst == nil {
		dst = make(http.Header, len(src))
	} else if len(dst) > 0 {
		clear(dst)
	}
	addEndToEnd(dst, src)
	return dst
}

// addEndToEnd adds to dst the fields of src that are end-to-end, and
// removes from dst those src's Connection names.
func addEndToEnd(dst, src http.Header) {
	if len(src) == 0 {
		return
	}
	for k, vs := range src {
		if !hopByHop(k) {
			dst[k] = vs
		}
	}
	for _, t := range src["Connection"] {
		for f := range strings.SplitSeq(t, ",") {
			delete(dst, connectionOption(strings.TrimSpace(f)))
		}
	}
}

// connectionOption is the canonical field name of a Connection option;
// the options nearly every response carries cost no allocation (canonical
// keys of lower-case input are made anew).
func connectionOption(f string) string {
	for _, o := range [...]string{"Keep-Alive", "Close", "Upgrade"} {
		if strings.EqualFold(f, o) {
			return o
		}
	}
	return textproto.CanonicalMIMEHeaderKey(f)
}

// hopByHop: the fields RFC 9110 §7.6.1 says a proxy must not forward
// (ReverseProxy's list).
func hopByHop(k string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// isUpgrade reports whether r asks to switch protocols on its connection.
func isUpgrade(r *http.Request) bool {
	return r.ProtoMajor == 1 && len(r.Header["Upgrade"]) > 0 && httpguts.HeaderValuesContainsToken(r.Header["Connection"], "Upgrade")
}
