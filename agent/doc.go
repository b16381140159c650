// Package agent is the node agent's pipeline: a Source offers candidate
// configurations (standalone YAML files now, the controller's stream later),
// the agent checks each one, compiles it with every Applier, then swaps it in
// as a whole and keeps it on disk. A candidate that does not check or compile
// is rejected and the last good configuration keeps serving.
//
// Every change goes through one goroutine (Run), so appliers never see two
// configurations at once; readers (the admin API, /readyz, /metrics) read
// the current State through an atomic pointer.
package agent
