// Command vipfailover is the VIP failover benchmark, run as root by
// hack/bench.sh (make bench). It measures, in network namespaces on one
// machine, with several repetitions each and their median and spread:
//
//  1. L2: two agents (node-a active, node-b standby) and a client on one
//     bridged segment; the client asks for the VIP by ARP every 10 ms;
//     from SIGKILL of the active agent (t0) to the first ARP frame from
//     the standby's MAC claiming the VIP (t1: its gratuitous ARP or its
//     answer, from which the client's traffic goes to the standby), with
//     the heartbeats at 3 × 300 ms (the default) and 3 × 100 ms;
//  2. BGP: two agents announce one VIP to FRR (zebra, bgpd, bfdd; ECMP
//     with maximum-paths 2); node-b is silenced by an nftables table
//     dropping all its packets (t0: when nft returned); t1 is the moment
//     zebra replaced the route without node-b's next hop in the kernel,
//     read from `ip monitor route nexthop` in the router's namespace (each
//     line timestamped as it arrives) and confirmed by polling vtysh's
//     show ip route json, which alone would add tens of milliseconds of
//     vtysh start-up per poll; with BFD at 3 × 100 ms, 3 × 300 ms, and
//     without BFD (hold time 9 s, keepalive 3 s);
//  3. the baseline, in the same run and topology: FRR (zebra, bgpd, bfdd)
//     instead of the agent on both nodes, with BFD at 3 × 300 ms and
//     3 × 100 ms, and the ratios agent/FRR.
//
// The report goes to <out>/vipfailover-<UTC time>.md. Everything created
// (namespaces, processes) is removed by name or pid.
package main
