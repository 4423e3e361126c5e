// Package sandbox is the sandbox-server core shared by the examples: a Node that keeps the
// node's sandboxes and their states (running, pausing, paused, resuming, deleting, died), over a
// Runtime that does the work — in-process fakes whose pause takes a configurable time (and, with
// Fake.SharePauses, shares the node's capacity with the pauses in flight, as real ones do), or
// real gVisor sandboxes driven through runsc — and a store of paused-sandbox records.
// NewRuntime picks the Runtime by name and lays its files out in a server's state directory.
//
// A sandbox server without a node-drain library loses every sandbox that is not paused when
// SIGKILL comes; the Node makes pausing and persisting one sandbox a single call, and lists
// the running ones as a pause.Lister so drainkit can preserve them in parallel.
//
//	rt := &sandbox.Fake{Dir: imagesDir, PauseLatency: 500 * time.Millisecond}
//	st, _ := store.Open(recordsDir)
//	node, problems, err := sandbox.NewNode(rt, st, logger) // paused records come back paused
//	defer node.Close()
//	err = node.AdoptCheckpoints(ctx, recordsDir, time.Minute, logger) // records what checkpoints a server before this one left running save
//	node.SweepOrphans(recordsDir, logger)                   // what pauses SIGKILL cut left, under the lock
//	info, err := node.Create(ctx, 3600)                      // running, times out in an hour
//	preserver, err := pause.New(pause.ListFunc(node.Running), pause.Config{}) // pauses what runs, in parallel
//
// Guarantees: every Node method that calls the runtime takes a context and returns by its
// deadline as far as the runtime does (Fake always does; Runsc kills runsc at the deadline);
// a sandbox's record is written (durably) before Pause reports it paused, and removed before
// Resume reports it running.
package sandbox
