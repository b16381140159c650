// Package pki makes and loads the mTLS material of the controller↔agent
// stream: a private CA, the controller's server certificate and the agents'
// shared client certificate, all ECDSA P-256.
//
// The controller calls Ensure at start: it creates the Secrets novaedge-ca,
// novaedge-controller-tls and novaedge-agent-tls when they are missing and
// otherwise checks the ones it finds (made by an earlier run, cert-manager or
// the user), and serves with ServerTLSConfig. The agent mounts
// novaedge-agent-tls and dials with ClientTLSConfig.
//
// Certificates are not rotated: leaves last LeafValidity and Ensure reports
// an expired one as an error naming its Secret.
package pki
