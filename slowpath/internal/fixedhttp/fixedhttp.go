// Package fixedhttp is a minimal HTTP/1.1 backend for benchmarks: it
// answers every request head with the same bytes and allocates nothing
// per request, so that allocations counted are the client's or proxy's.
// Requests must have no body.
package fixedhttp

import (
	"bufio"
	"net"
)

// Serve answers every request on connections accepted from ln with
// answer, until ln is closed.
func Serve(ln net.Listener, answer []byte) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go serveConn(c, answer)
	}
}

func serveConn(c net.Conn, answer []byte) {
	defer func() { _ = c.Close() }()
	br := bufio.NewReader(c)
	for {
		// Read to the empty line that ends the head.
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				return
			}
			if len(line) <= 2 {
				break
			}
		}
		if _, err := c.Write(answer); err != nil {
			return
		}
	}
}
