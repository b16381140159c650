// Package flowhash is the Go twin of the XDP fast path's flow hash
// (flow_hash in bpf/fastpath_helpers.h). Both must give the same value for
// the same 5-tuple: the program picks Maglev slot Hash(flow) mod M, and
// tools, tests and the agent predict that choice with this package.
package flowhash
