// Package frr is the test bed for protocol tests against FRR: named network
// namespaces joined by veth pairs, and FRR daemons (zebra, bgpd, bfdd, …)
// from the Debian package started inside a namespace with every path they
// use (configuration, pid files, vty and zserv sockets) in a directory of
// their own, so that nothing touches a system FRR or the host's network.
//
// Everything created is removed in t.Cleanup, by name or pid: daemons are
// killed, namespaces (with their links, addresses and routes) deleted.
// Missing privileges or programs fail the test with what to install; the
// tests built on this package never skip.
package frr
