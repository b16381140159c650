package slowpath

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/slowpath/internal/testcert"
)

// rawResponses are what the recording backend answers, by request path:
// heads the fields path takes and heads it leaves to the header map
// (Transfer-Encoding, Trailer, folded lines, 1xx, hop-by-hop fields named
// by Connection).
var rawResponses = map[string]string{
	"/plain":           "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-A: 1\r\nx-b: two\r\nX-A: 3\r\nKeep-Alive: timeout=5\r\nConnection: keep-alive\r\nContent-Length: 5\r\n\r\nhello",
	"/dated":           "HTTP/1.1 404 Not Found\r\nDate: Mon, 02 Jan 2006 15:04:05 GMT\r\nContent-Length: 0\r\n\r\n",
	"/reason":          "HTTP/1.1 299 Fine Thanks\r\nContent-Length: 2\r\n\r\nok",
	"/named":           "HTTP/1.1 200 OK\r\nConnection: x-secret\r\nX-Secret: s\r\nContent-Length: 2\r\n\r\nok",
	"/close":           "HTTP/1.1 200 OK\r\nConnection: close\r\nClose: field\r\nContent-Length: 2\r\n\r\nok",
	"/chunked":         "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n2\r\nok\r\n0\r\nX-T: t\r\n\r\n",
	"/chunked-plain":   "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-C: 1\r\n\r\n2\r\nok\r\n3\r\n!!!\r\n0\r\n\r\n",
	"/chunked-trailer": "HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n2\r\nok\r\n0\r\nX-Unannounced: t\r\n\r\n",
	"/chunked-length":  "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 9\r\n\r\n2\r\nok\r\n0\r\n\r\n",
	"/alt-svc":         "HTTP/1.1 200 OK\r\nAlt-Svc: h2=\":8443\"\r\nContent-Length: 2\r\n\r\nok",
	"/http10":          "HTTP/1.0 200 OK\r\nX-Old: yes\r\n\r\nuntil the end",
	"/nolen":           "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end",
	"/fold":            "HTTP/1.1 200 OK\r\nX-Fold: a\r\n b\r\nContent-Length: 2\r\n\r\nok",
	"/early":           "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
	"/204":             "HTTP/1.1 204 No Content\r\nX-E: 1\r\n\r\n",
	"/304":             "HTTP/1.1 304 Not Modified\r\nEtag: \"x\"\r\n\r\n",
	"/head":            "HTTP/1.1 200 OK\r\nContent-Length: 100\r\nX-H: 1\r\n\r\n",
	"/badlen":          "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
}

// recordingBackend is an HTTP/1.1 server that records every request head
// as it arrived and answers with rawResponses[path] (closing after answers
// that end with the connection).
type recordingBackend struct {
	ln    net.Listener
	mu    sync.Mutex
	heads [][]byte // head, body, head, body…
}

func startRecordingBackend(t *testing.T) *recordingBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &recordingBackend{ln: ln}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go b.serve(c)
		}
	}()
	return b
}

func (b *recordingBackend) serve(c net.Conn) {
	defer func() { _ = c.Close() }()
	br := bufio.NewReader(c)
	for {
		var head []byte
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				return
			}
			head = append(head, line...)
			if len(line) <= 2 && strings.TrimRight(string(line), "\r\n") == "" {
				break
			}
		}
		// The body, read by its framing; nothing else is sent before
		// the answer, so the reader cannot take the next request.
		req, err := http.ReadRequest(bufio.NewReader(io.MultiReader(bytes.NewReader(head), br)))
		if err != nil {
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return
		}
		b.mu.Lock()
		b.heads = append(b.heads, head, body)
		b.mu.Unlock()
		fields := strings.Fields(string(head[:bytes.IndexByte(head, '\n')]))
		path, _, _ := strings.Cut(fields[1], "?")
		resp, ok := rawResponses[path]
		if !ok {
			resp = "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n"
		}
		if _, err := io.WriteString(c, resp); err != nil {
			return
		}
		if strings.Contains(resp, "Connection: close") || strings.HasPrefix(resp, "HTTP/1.0") {
			return
		}
	}
}

// take returns the first request recorded and not taken yet: its head
// and its body (decoded from its framing).
func (b *recordingBackend) take() (head, body []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.heads) == 0 {
		return nil, nil
	}
	head, body = b.heads[0], b.heads[1]
	b.heads = b.heads[2:]
	return head, body
}

// rawRequests are the requests sent to both proxies; raw tells whether
// the raw path takes them.
var rawRequests = []struct {
	name, req string
	raw       bool
}{
	{"plain", "GET {p} HTTP/1.1\r\nHost: a.example\r\nuser-agent: t\r\nAccept: */*\r\nX-Many: 1\r\nX-Many: 2\r\n\r\n", true},
	{"forwarding fields", "GET {p}?q=1&r HTTP/1.1\r\nHost: a.example:8080\r\nX-Forwarded-For: 10.0.0.1\r\nForwarded: for=10.0.0.1\r\nX-Request-Id: abc\r\nX-Forwarded-Host: spoof\r\nX-Forwarded-Proto: https\r\nTe: trailers, deflate\r\n\r\n", true},
	{"hop-by-hop", "GET {p} HTTP/1.1\r\nHost: a\r\nConnection: close\r\nClose: x\r\nKeep-Alive: 5\r\nProxy-Authorization: Basic eDp5\r\nProxy-Connection: keep-alive\r\nTe: deflate\r\n\r\n", true},
	{"HTTP/1.0", "GET {p} HTTP/1.0\r\nHost: a\r\n\r\n", true},
	{"HTTP/1.0 keep-alive", "GET {p} HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\n", true},
	{"HEAD", "HEAD {p} HTTP/1.1\r\nHost: a\r\n\r\n", true},
	{"DELETE with an idempotency key", "DELETE {p} HTTP/1.1\r\nHost: a\r\nIdempotency-Key: k\r\n\r\n", true},
	{"Connection names a field", "GET {p} HTTP/1.1\r\nHost: a\r\nConnection: x-foo\r\nX-Foo: 1\r\n\r\n", false},
	{"escaped path", "GET {p}/%41b HTTP/1.1\r\nHost: a\r\n\r\n", false},
	{"body", "POST {p} HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi", true},
	{"empty body", "PUT {p} HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nX-After: 1\r\n\r\n", true},
	{"chunked body", "POST {p} HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n", false},
	{"Expect", "POST {p} HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi", false},
}

// exchangeResult is what one request did: the head the backend got and
// the response the client got, with what differs per request (the
// generated request ID, Date) checked and left out.
type exchangeResult struct {
	upstream string
	response string
}

// equivalenceSetup starts the recording backend and two proxies routing
// to it, one with the raw path and one without; served counts the raw
// path's requests; paths are rawResponses' keys, sorted.
func equivalenceSetup(t *testing.T) (served *atomic.Int64, be *recordingBackend, rawEnv, mapEnv *env, paths []string) {
	t.Helper()
	served = new(atomic.Int64)
	rawServed = func() { served.Add(1) }
	t.Cleanup(func() { rawServed = nil })
	be = startRecordingBackend(t)
	rawEnv = newEnv(t)
	mapEnv = newEnvWith(t, func(o *Options) { o.NoRawPath = true })
	for _, e := range []*env{rawEnv, mapEnv} {
		e.mustApply(e.snap(pb.Protocol_PROTOCOL_HTTP, nil, []*pb.Route{route("ns/r", rule(prefix("/"), "ns/a"))}, []*pb.Backend{backendOf("ns/a", be.ln.Addr().String())}))
	}
	for p := range rawResponses {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	return served, be, rawEnv, mapEnv, paths
}

func TestRawPathEquivalence(t *testing.T) {
	served, be, rawEnv, mapEnv, paths := equivalenceSetup(t)
	rawCases := 0
	for _, rq := range rawRequests {
		for _, path := range paths {
			switch {
			case path == "/head" && !strings.HasPrefix(rq.req, "HEAD"),
				rq.name == "HEAD" && path != "/head" && path != "/plain",
				rq.name == "Expect" && path != "/plain": // each waits for a 100 Continue that never comes
				continue
			}
			t.Run(rq.name+" "+path, func(t *testing.T) {
				req := strings.ReplaceAll(rq.req, "{p}", path)
				before := served.Load()
				got := exchangeVia(t, rawEnv.addr, be, req)
				if n := served.Load() - before; rq.raw && n != 1 || !rq.raw && n != 0 {
					t.Errorf("raw path served %d requests, want raw=%v", n, rq.raw)
				}
				want := exchangeVia(t, mapEnv.addr, be, req)
				if got.upstream != want.upstream {
					t.Errorf("upstream request differs\nraw path:\n%s\nheader map path:\n%s", got.upstream, want.upstream)
				}
				if got.response != want.response {
					t.Errorf("client response differs\nraw path:\n%s\nheader map path:\n%s", got.response, want.response)
				}
			})
			if rq.raw {
				rawCases++
			}
		}
	}
	if rawCases == 0 {
		t.Fatal("no case for the raw path")
	}
}

var requestIDPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

// exchangeVia sends req on a new connection to proxy and returns what the
// backend and the client saw, normalized: header fields sorted by name
// (the header map path sends them in map order), values in order.
func exchangeVia(t *testing.T, proxy string, be *recordingBackend, req string) exchangeResult {
	t.Helper()
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	method, _, _ := strings.Cut(req, " ")
	var res exchangeResult
	var b strings.Builder
	br := bufio.NewReader(c)
	var resp *http.Response
	for {
		resp, err = http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			t.Fatalf("read response: %v", err)
		}
		if resp.StatusCode >= 200 {
			break
		}
		b.WriteString(resp.Proto + " " + resp.Status + "\n") // 1xx
		writeSorted(&b, resp.Header)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read response body: %v", err)
	}
	b.WriteString(resp.Proto + " " + resp.Status + "\n")
	if resp.Header.Get("Date") == "" {
		t.Error("response without Date")
	}
	resp.Header.Del("Date")
	writeSorted(&b, resp.Header)
	b.WriteString("close=" + strconv.FormatBool(resp.Close) + " length=" + strconv.FormatInt(resp.ContentLength, 10) + "\n")
	writeSorted(&b, resp.Trailer)
	b.Write(body)
	res.response = b.String()

	res.upstream = upstreamSeen(t, be, strings.Contains(req, "X-Request-Id"))
	return res
}

// upstreamSeen is the request the backend got last, normalized ("" when
// the proxy answered itself): the generated request ID (unless the client
// sent one, clientID) is checked and left out.
func upstreamSeen(t *testing.T, be *recordingBackend, clientID bool) string {
	t.Helper()
	head, upBody := be.take()
	if head == nil {
		return ""
	}
	ur, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
	if err != nil {
		t.Fatalf("backend got an unreadable head: %v\n%s", err, head)
	}
	if !clientID {
		if id := ur.Header.Get("X-Request-Id"); !requestIDPattern.MatchString(id) {
			t.Errorf("request ID %q", id)
		}
		ur.Header.Del("X-Request-Id")
	}
	var b strings.Builder
	b.WriteString(ur.Method + " " + ur.RequestURI + " " + ur.Proto + "\nHost: " + ur.Host + "\n")
	writeSorted(&b, ur.Header)
	b.WriteString("body: " + string(upBody) + "\n")
	return b.String()
}

func writeSorted(b *strings.Builder, h http.Header) {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b.WriteString(k + ": " + strings.Join(h[k], " | ") + "\n")
	}
}

// TestRawPathRetryBodyLater retries a raw request whose body arrived after
// its head: reading the body refills the server's read buffer, where the
// head was, so the retry must send a head kept elsewhere.
func TestRawPathRetryBodyLater(t *testing.T) {
	var mu sync.Mutex
	var got []string
	var tries atomic.Int32
	be := httptestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.RequestURI()+" "+r.Header.Get("X-Custom")+" "+r.Header.Get("User-Agent")+" "+string(body))
		mu.Unlock()
		if tries.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	e := newEnv(t)
	r := rule(prefix("/"), "ns/a")
	r.Retry = &pb.RetryPolicy{MaxRetries: 1, RetryOn: []string{"5xx"}, RetryNonIdempotent: true, BackoffMs: 1}
	e.mustApply(e.snap(pb.Protocol_PROTOCOL_HTTP, nil, []*pb.Route{route("ns/r", r)}, []*pb.Backend{backendOf("ns/a", be)}))

	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	head := "POST /up?x=1 HTTP/1.1\r\nHost: a\r\nX-Custom: kept-intact\r\nUser-Agent: t\r\nContent-Length: 4000\r\n\r\n"
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the head is read and waits for its body
	body := strings.Repeat("b", 4000)
	if _, err := io.WriteString(c, body); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	rb, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(rb) != "ok" {
		t.Fatalf("got %d %q", resp.StatusCode, rb)
	}
	want := "POST /up?x=1 kept-intact t " + body
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0] != want || got[1] != want {
		for i, g := range got {
			t.Errorf("try %d: %.80q", i+1, g)
		}
		t.Fatalf("want two tries of %.80q", want)
	}
}

func httptestServer(t *testing.T, h http.Handler) string {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return hostport(s)
}

// TestRawPathKeepsWeights splits a rule evenly between a backend the raw
// path serves and one it does not (hashing on a header): the split must
// stay even, which it would not if the raw path declined after picking.
func TestRawPathKeepsWeights(t *testing.T) {
	a, b := echoServer(t, "a"), echoServer(t, "b")
	e := newEnv(t)
	bb := backendOf("ns/b", hostport(b))
	bb.HashPolicy = &pb.HashPolicy{Header: "X-User"}
	e.mustApply(e.snap(pb.Protocol_PROTOCOL_HTTP, nil, []*pb.Route{route("ns/r", rule(prefix("/"), "ns/a", "ns/b"))},
		[]*pb.Backend{backendOf("ns/a", hostport(a)), bb}))
	const n = 1000
	hits := map[string]int{}
	c := &http.Client{}
	for range n {
		_, got, _ := get(t, c, "http://"+e.addr+"/")
		hits[got.Backend]++
	}
	// Even odds: 500 ± 16 (one standard deviation); a raw path that
	// declined after its pick would send 750 to a.
	if share := float64(hits["a"]) / n; share < 0.42 || share > 0.58 {
		t.Fatalf("backend a got %d of %d requests (b %d), want about half", hits["a"], n, hits["b"])
	}
}

// TestRawPathAltSvc: HTTPS responses of a gateway with an HTTP3 listener
// carry its Alt-Svc on the raw path too, unless the backend sends its own.
func TestRawPathAltSvc(t *testing.T) {
	var served atomic.Int64
	rawServed = func() { served.Add(1) }
	t.Cleanup(func() { rawServed = nil })

	be := startRecordingBackend(t)
	e := newEnv(t)
	ca, _ := testcert.NewCA("test")
	cp, kp, _ := ca.Leaf("h3.test")
	tlsCfg := &pb.ListenerTLS{Certificates: []string{"ns/c"}}
	s := e.snap(pb.Protocol_PROTOCOL_HTTPS, tlsCfg, []*pb.Route{route("ns/r", rule(prefix("/"), "ns/a"))},
		[]*pb.Backend{backendOf("ns/a", be.ln.Addr().String())}, &pb.Certificate{Name: "ns/c", CertPem: cp, KeyPem: kp})
	// The HTTP3 listener needs no socket here: only its presence makes
	// the HTTPS listener advertise it.
	h3l := &pb.Listener{Name: "ns/gw/h3", Gateway: "ns/gw", Addresses: []string{"127.0.0.1"}, Port: e.port, Protocol: pb.Protocol_PROTOCOL_HTTP3, Tls: tlsCfg, Routes: []string{"ns/r"}}
	s.Cluster.Listeners = append(s.Cluster.Listeners, h3l)
	s.Cluster.Routes[0].Listeners = append(s.Cluster.Routes[0].Listeners, h3l.Name)
	e.mustApply(s)

	ours := `h3=":` + strconv.Itoa(int(e.port)) + `"; ma=86400`
	for _, proto := range []string{"HTTP/1.1", "HTTP/2.0"} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{ServerName: "h3.test", RootCAs: ca.Pool()}, ForceAttemptHTTP2: proto == "HTTP/2.0"}
		c := &http.Client{Transport: tr}
		before := served.Load()
		for _, tc := range []struct{ path, want string }{{"/plain", ours}, {"/alt-svc", `h2=":8443"`}, {"/plain", ours}} {
			resp, _, body := get(t, c, "https://"+e.addr+tc.path)
			if got := resp.Header.Values("Alt-Svc"); len(got) != 1 || got[0] != tc.want {
				t.Errorf("%s %s: Alt-Svc %q, want %q", proto, tc.path, got, tc.want)
			}
			if resp.StatusCode != 200 || resp.Proto != proto || string(body) != "hello" && tc.path == "/plain" {
				t.Errorf("%s %s: %d %s %q", proto, tc.path, resp.StatusCode, resp.Proto, body)
			}
			if got := resp.Header.Values("X-A"); tc.path == "/plain" && !slices.Equal(got, []string{"1", "3"}) {
				t.Errorf("%s %s: X-A %q, want both values in order", proto, tc.path, got)
			}
			_, _ = be.take()
		}
		tr.CloseIdleConnections()
		if n := served.Load() - before; n != 3 {
			t.Errorf("%s: raw path served %d of 3 requests", proto, n)
		}
	}
}

// rawH2Requests are HTTP/2 requests sent to both proxies: regular fields
// (name, value pairs after the pseudo-header fields), a body (sent as
// DATA after HEADERS), and whether the raw path takes them.
var rawH2Requests = []struct {
	name   string
	method string
	fields []string
	body   string
	raw    bool
}{
	{"plain", "GET", []string{"user-agent", "t", "accept", "*/*", "x-many", "1", "x-many", "2", "x-dash-name-z", "v"}, "", true},
	{"forwarding fields", "GET", []string{"x-forwarded-for", "10.0.0.1", "forwarded", "for=10.0.0.1", "x-request-id", "abc",
		"x-forwarded-host", "spoof", "x-forwarded-proto", "https", "te", "trailers"}, "", true},
	{"split cookie", "GET", []string{"cookie", "a=1", "x-b", "2", "cookie", "b=2", "cookie", "c=3"}, "", true},
	{"host field", "GET", []string{"host", "other.example", "x-a", "1"}, "", true},
	{"proxy fields", "GET", []string{"proxy-authorization", "Basic eDp5", "x-a", "1"}, "", true},
	{"HEAD", "HEAD", nil, "", true},
	{"DELETE with an idempotency key", "DELETE", []string{"idempotency-key", "k"}, "", true},
	{"body", "POST", []string{"content-length", "2", "content-type", "text/plain"}, "hi", true},
	{"empty body", "PUT", []string{"content-length", "0"}, "", true},
	{"body of unknown length", "POST", nil, "hi", false},
	{"gRPC", "POST", []string{"content-type", "application/grpc", "te", "trailers", "content-length", "5"}, "\x00\x00\x00\x00\x00", false},
	{"trailers declared", "POST", []string{"trailer", "x-t", "content-length", "2"}, "hi", false},
}

// TestRawPathEquivalenceH2 is TestRawPathEquivalence for HTTP/2 clients
// (h2c with prior knowledge): HTTP/2 fields in, HTTP/1.1 fields back.
func TestRawPathEquivalenceH2(t *testing.T) {
	served, be, rawEnv, mapEnv, paths := equivalenceSetup(t)
	rawCases := 0
	for _, rq := range rawH2Requests {
		for _, path := range paths {
			if path == "/head" && rq.method != "HEAD" || rq.method == "HEAD" && path != "/head" && path != "/plain" {
				continue
			}
			t.Run(rq.name+" "+path, func(t *testing.T) {
				before := served.Load()
				got := h2ExchangeVia(t, rawEnv.addr, be, rq.method, path, rq.fields, rq.body)
				if n := served.Load() - before; rq.raw && n != 1 || !rq.raw && n != 0 {
					t.Errorf("raw path served %d requests, want raw=%v", n, rq.raw)
				}
				want := h2ExchangeVia(t, mapEnv.addr, be, rq.method, path, rq.fields, rq.body)
				if got.upstream != want.upstream {
					t.Errorf("upstream request differs\nraw path:\n%s\nheader map path:\n%s", got.upstream, want.upstream)
				}
				if got.response != want.response {
					t.Errorf("client response differs\nraw path:\n%s\nheader map path:\n%s", got.response, want.response)
				}
				if rq.raw && strings.Contains(got.response, ":status 200") && !strings.Contains(got.upstream, "Host: a.example:8443") {
					t.Errorf("upstream Host is not the :authority: %s", got.upstream)
				}
			})
			if rq.raw {
				rawCases++
			}
		}
	}
	if rawCases == 0 {
		t.Fatal("no case for the raw path")
	}
}

// h2ExchangeVia sends one request over a new h2c connection to proxy
// (:authority a.example:8443) and returns what the backend and the client
// saw, normalized: each header block's fields sorted by name, values in
// order; DATA joined; a reset named.
func h2ExchangeVia(t *testing.T, proxy string, be *recordingBackend, method, path string, fields []string, body string) exchangeResult {
	t.Helper()
	nc, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = nc.Close() }()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	fr := http2.NewFramer(nc, nc)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	var hbuf bytes.Buffer
	enc := hpack.NewEncoder(&hbuf)
	all := append([]string{":method", method, ":scheme", "http", ":authority", "a.example:8443", ":path", path}, fields...)
	for i := 0; i+1 < len(all); i += 2 {
		_ = enc.WriteField(hpack.HeaderField{Name: all[i], Value: all[i+1]})
	}
	if _, err := io.WriteString(nc, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hbuf.Bytes(), EndStream: body == "" && method != "POST", EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if body != "" || method == "POST" {
		if err := fr.WriteData(1, true, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	var b strings.Builder
	var data []byte
	clientID := false
	for i := 0; i+1 < len(fields); i += 2 {
		clientID = clientID || fields[i] == "x-request-id"
	}
read:
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("read frame: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			// Names as sent (lower case): http.Header's canonical form
			// would hide upper-case names, which HTTP/2 forbids.
			h := http.Header{}
			final := len(data) == 0 && f.PseudoValue("status") != "" && !strings.HasPrefix(f.PseudoValue("status"), "1")
			dates := 0
			for _, hf := range f.Fields {
				switch {
				case hf.Name == ":status":
					b.WriteString(":status " + hf.Value + "\n")
				case hf.Name == "date" && final:
					dates++
				default:
					h[hf.Name] = append(h[hf.Name], hf.Value)
				}
			}
			if final && dates != 1 {
				t.Errorf("response with %d Date fields", dates)
			}
			writeSorted(&b, h)
			if f.StreamEnded() {
				break read
			}
		case *http2.DataFrame:
			data = append(data, f.Data()...)
			if f.StreamEnded() {
				break read
			}
		case *http2.RSTStreamFrame:
			b.WriteString("reset " + f.ErrCode.String() + "\n")
			break read
		case *http2.GoAwayFrame:
			b.WriteString("goaway " + f.ErrCode.String() + "\n")
			break read
		}
	}
	b.WriteString("body: " + string(data) + "\n")
	return exchangeResult{response: b.String(), upstream: upstreamSeen(t, be, clientID)}
}

func TestNewRequestID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := newRequestID()
		if !requestIDPattern.MatchString(id) || seen[id] {
			t.Fatalf("request ID %q: not 32 hex digits, or seen before", id)
		}
		seen[id] = true
	}
}
