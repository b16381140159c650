// Package arp is the benchmark's ARP probe: an AF_PACKET socket opened
// inside a network namespace that sends ARP requests and reads every ARP
// frame on one link, kept in an internal package as the repository's lint
// rules require of code using golang.org/x/sys/unix.
package arp
