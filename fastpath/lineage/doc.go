// Package lineage carries a Maglev table from one snapshot to the next, so
// that every node builds the same minimally disruptive table.
//
// maglev.BuildFrom remaps only the slots a change has to move (removing one
// of 1000 backends moves its 0.1 % of the slots, where a rebuild from
// scratch moves about 1 %), but its result depends on the previous table.
// A node that builds from the table it has installed therefore agrees with
// the other nodes only if all of them saw the same sequence of snapshots;
// a node that restarted, joined later or skipped a version would not, and
// ECMP would then send a flow that moves between nodes to two different
// backends.
//
// So the previous table travels in the snapshot instead: the leader
// controller persists the table of every cluster-wide FAST plan entry
// (Next, in the MaglevLineage form of the snapshot API), every replica puts
// the persisted lineage into the entries it builds, and every node builds
// maglev.BuildFrom(lineage, endpoints) (Prev turns the lineage into the
// node's own backend IDs). All inputs are in the snapshot, so the result is
// the same on every node whatever its history; once the leader has
// persisted the new table, building from it gives it back unchanged.
//
// Only entries with at least MinBackends live backends get a lineage
// (Wanted): below that a table built from scratch is nearly minimal anyway.
//
// Members is the one place that says which endpoints of a plan entry get
// slots and with which weight; the fast path's manager and the controller
// both use it.
package lineage
