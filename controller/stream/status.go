package stream

import (
	"fmt"
	"time"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// Change says what happened to an agent, in AgentStatus.
type Change string

// The changes Options.OnAgentChange reports.
const (
	// Connected: an agent subscribed for the node.
	Connected Change = "Connected"
	// Disconnected: the node's stream ended (DisconnectReason says why).
	Disconnected Change = "Disconnected"
	// Acked: the agent applied a snapshot (AppliedVersion).
	Acked Change = "Acked"
	// Nacked: the agent rejected a snapshot (NackVersion, NackError).
	Nacked Change = "Nacked"
)

// AgentStatus is what the server knows of one node's agent. Times are zero
// until the event happened.
type AgentStatus struct {
	// Node is the node the agent subscribed for.
	Node string
	// Change is the last thing that happened.
	Change Change

	// Connected is true while the node has a stream.
	Connected bool
	// Peer is the address the agent connects from (the last one when
	// disconnected).
	Peer string
	// AgentVersion is the version the agent reported when it subscribed.
	AgentVersion     string
	ConnectedAt      time.Time
	DisconnectedAt   time.Time
	DisconnectReason string
	// LastMessageAt is when the agent last sent anything (subscribe,
	// ACK, NACK, keepalive answer).
	LastMessageAt time.Time

	// PublishedVersion is the version of the latest snapshot published for
	// the node (0: none yet).
	PublishedVersion uint64
	// SentVersion is the last version sent to the agent, and SentAt when.
	SentVersion uint64
	SentAt      time.Time

	// AppliedVersion and AppliedHash are what the agent runs, as it said
	// when it subscribed or in its last ACK; AppliedAt is when it said so.
	AppliedVersion uint64
	AppliedHash    string
	AppliedAt      time.Time
	// InSync is true when the agent runs the content of the latest snapshot
	// published for its node.
	InSync bool

	// NackVersion is the last version the agent rejected, with its error
	// and diagnostics.
	NackVersion     uint64
	NackError       string
	NackDiagnostics []*pb.Diagnostic
	NackAt          time.Time
}

// String describes st for logs.
func (st AgentStatus) String() string {
	state := "disconnected"
	if st.Connected {
		state = "connected from " + st.Peer
	}
	return fmt.Sprintf("node %s: %s, applied %d, sent %d", st.Node, state, st.AppliedVersion, st.SentVersion)
}
