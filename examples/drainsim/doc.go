// Command drainsim shows, in under 30 seconds, what drainkit changes for a sandbox node
// that Kubernetes terminates: one node with N running sandboxes goes through a kubelet
// termination twice, first as the seed server (AgentENV before drainkit: a preStop hook that
// waits for zero running sandboxes without a bound, then one pause at a time after SIGTERM)
// and then as sandboxd wired with drainkit, and it prints both timelines and a table of
// what survived. A node's first drain has measured nothing and plans one pause at a
// time; with -warm, drainkit's node drains once to learn, and a new sandboxd on the same
// state directory (a DaemonSet's next pod on the node) is the one terminated and shown.
//
//	go run ./examples/drainsim
//	go run ./examples/drainsim -n 40 -pause 300ms -concurrency 8
//	go run ./examples/drainsim -warm    # drainkit's node drained before: it plans with the level it learned
//	sudo go run ./examples/drainsim -runtime runsc   # real gVisor sandboxes, about a minute
//
// The servers are real processes with a real device daemon child; the kubelet is simulated
// (internal/kubeletsim) with its exact arithmetic, in real time with a scaled-down grace
// period. Both servers create the same sandboxes (one -id-seed), whose fake pauses share a
// disk that writes 4 at full speed (-pause-share), as real snapshots share a node's. The
// same scenario at full scale (3600 s, 200 sandboxes, the same disk, drainkit's limit
// adaptive) runs in virtual time under testing/synctest in this package's
// TestFullScaleInVirtualTime.
package main
