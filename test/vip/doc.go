// Package vip tests VIP announcement end to end: the real novaedge-agent
// binary, in standalone mode, runs in a node network namespace between a
// router namespace running FRR (zebra and bgpd, the top-of-rack router) and
// a client namespace on the node's Ethernet segment.
//
// The test checks that FRR learns the BGP VIP's /32 from the agent and
// installs it; that the L2ARP VIP is answered on the client's segment (the
// client's kernel resolves it to the node's MAC and reaches it); that
// novaedgectl vip status and bgp peers show both; and that SIGTERM keeps
// FRR's route through graceful restart (marked stale) until a restarted
// agent refreshes it. A second run enables BFD on the BGP VIP with FRR's
// bfdd as the peer and checks that the agent's session comes Up.
//
// TestL2Failover runs two agents (node-a active, node-b standby, from the
// novaedge.io/l2-nodes annotation) and a client on one bridged segment and
// checks, with raw-socket ARP requests from the client, that exactly one
// MAC answers for the VIP: node-a's when all is well, node-b's when
// node-a's BFD heartbeats are dropped (nftables) and after node-a's agent
// is killed, and node-a's when node-b's heartbeats are dropped.
//
// TestBFDFailover has two agents announce one BGP VIP to FRR (ECMP) with
// BFD at 3 × 300 ms against FRR's bfdd, silences one node with nftables
// (the process keeps running, so only BFD can tell), and checks that FRR
// reports its BFD session down with "control detection time expired" and
// removes only that node's path, which comes back when the silence ends.
//
// TestBFDDaemonAgentRestart runs novaedge-bfdd beside each agent: SIGTERM
// and SIGKILL of an agent leave FRR's BFD session Up (no down event) and
// both ECMP paths installed; a silenced node still loses its path.
// TestAgentUsesFRRsBFDD puts FRR's bfdd on the node: the agent's session is
// a bfd peer there, followed through a silence and kept across a restart.
// TestAgentIPv6 covers /128 and dual-stack BGP VIPs over IPv6 and IPv4
// sessions and an IPv6 L2 VIP (unsolicited NA, NDP resolution, unicast NUD
// probes, graceful restart, an upgrade over an old binding).
// TestAgentWithdrawsOnHealthFailure: a standalone agent's own health
// checks withdraw a BGP VIP whose only backend stops answering, and
// announce it again when it recovers.
// TestControllerHealthWithdraw runs the controller, two agents announcing a
// BGP VIP to FRR (ECMP) and an HTTP backend: when the backend fails its
// health checks, the agents' verdicts reach the snapshot, both withdraw
// the route with their sessions kept Established, and it comes back with
// both next hops when the backend heals; HTTP through the VIP works.
// TestControllerFailover runs the controller and two agents in controller
// mode against a real kube-apiserver (envtest) and checks the takeover by
// heartbeats, the controller's promotion and the killed node's return as
// standby, with exactly one MAC answering throughout.
//
// The tests need root, iproute2, nftables and FRR; it fails, never skips, saying what
// to install. Everything is cleaned up by test/frr (namespaces, daemons) and
// by the test (the agent processes, by pid).
package vip
