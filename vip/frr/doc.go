// Package frr announces NovaEdge VIPs with OSPF by driving FRR's daemons
// (zebra, ospfd and, for BFD, bfdd) through vtysh, with the intent and
// reconcile pattern of NovaRoute: a [Driver] holds the desired state,
// compares it line by line with what it applied before and with FRR's
// running configuration, and applies the difference in one vtysh batch,
// periodically and whenever [Driver.Trigger] or [Driver.SetDesired] asks.
//
// # What the driver writes
//
// Every VIP address is advertised as a host route by enabling OSPF on that
// one address of the loopback interface: `ip ospf area <area> <vip>` and
// `ip ospf cost <cost> <vip>` under `interface lo`. FRR originates a stub
// link with mask /32 and the per-address cost for it, and for nothing else
// on lo: 127.0.0.1, mode Local VIPs and L2 VIPs bound on lo stay out of
// OSPF. We chose this over `redistribute connected route-map …`, which
// would also match only the VIPs, because redistribution is one setting
// per OSPF instance that an operator may already use with a route map of
// their own, and because it yields external (type 5) LSAs that stub and
// NSSA areas drop. The VIP address itself must be bound on lo by someone
// else (the announcement manager binds it, as it does for BGP mode): a VIP
// that is not bound is not advertised, and [State] says so.
//
// The uplinks (the interfaces facing the routers) get `ip ospf area`, the
// hello and dead intervals, md5 authentication (`ip ospf authentication
// message-digest`, `ip ospf message-digest-key`) and, when a VIP asks for
// BFD, `ip ospf bfd` with a BFD profile of the driver's own under `bfd`,
// served by FRR's bfdd (the node's only BFD speaker while FRR runs).
// `router ospf` gets the router ID and `graceful-restart`.
//
// # Ownership
//
// The driver owns exactly the lines it wrote, recorded in memory and, with
// [Options.StateFile], on disk, so that an agent that restarts still knows
// them. It never edits or removes another line: a line written by someone
// else that sets the same thing differently (another cost, another hello
// interval on an uplink) is left in place and reported as a conflict; an
// identical one satisfies the intent without becoming the driver's. Blocks
// the driver created (`router ospf`, its BFD profiles, `bfd`) are removed
// when the driver no longer needs them and nobody else wrote into them.
// FRR 8.4 has no JSON running configuration, so the driver parses the text
// of `show running-config`, only for the blocks and lines it writes; FRR's
// canonical forms are followed when rendering (values FRR does not show
// because they are its defaults are not written).
//
// The applied configuration is not saved into FRR's startup files: a
// restarted ospfd comes back without it, and the next reconcile (periodic)
// writes it again. Graceful restart (`graceful-restart grace-period`) lets
// the routers keep forwarding through a planned restart of ospfd after
// [Driver.PrepareRestart]; an agent restart does not touch FRR at all.
//
// # State
//
// [Driver.State] reports the OSPF neighbours (`show ip ospf neighbor
// json`), the VIP host routes in this node's router LSA (`show ip ospf
// database router self-originate json`) and the errors of the last
// reconcile, each naming the field or line. FRR does not count packets it
// drops for failed authentication, so [Options.CheckHellos] opens a raw
// socket per uplink that reads the neighbours' OSPF packets and verifies
// their authentication with the configured key: a mismatch is reported as
// "OSPF authentication mismatch on <if> with <peer>: …", as are hello and
// dead interval and area mismatches.
//
// IPv6 VIPs need ospf6d and are not supported: [FromNode] reports them.
package frr
