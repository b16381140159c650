package main

import (
	"fmt"
	"time"

	"github.com/novaedge/novaedge/controller/pki"
)

// benchCert makes the certificate (and its key, PEM) every proxy serves
// TLS with: an ECDSA P-256 server certificate for bench.test from a CA
// made for the run, valid for a day. wrk does not verify it.
func benchCert() (certPEM, keyPEM []byte, err error) {
	caCert, caKey, err := pki.NewCA("novaedge httpbench CA", 24*time.Hour)
	if err != nil {
		return nil, nil, fmt.Errorf("bench CA: %w", err)
	}
	return pki.IssueServer(caCert, caKey, []string{"bench.test"}, 24*time.Hour)
}
