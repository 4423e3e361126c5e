package draintest_test

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/draintest"
)

// A shutdown of a fake node in real time (a few milliseconds): three
// sandboxes preserved, one that fails once and is retried, and one that
// vanishes on its own, which is not a loss. In a test, run the same under
// testing/synctest (see the package documentation) and the latencies can be
// the real ones, minutes long.
func Example() {
	node := draintest.NewNode()
	node.AddN("sb", 3, 10*time.Millisecond)
	node.Add(
		&draintest.Sandbox{Name: "flaky", Latency: 10 * time.Millisecond, Faults: []draintest.Fault{draintest.Transient}},
		&draintest.Sandbox{Name: "gone", Faults: []draintest.Fault{draintest.Vanish}},
	)
	budget, err := deadline.New(30*time.Second, deadline.Config{})
	if err != nil {
		panic(err)
	}
	d, err := drain.New(drain.Config{Budget: budget, Sandboxes: node})
	if err != nil {
		panic(err)
	}

	sigs := make(chan os.Signal, 1)
	sigs <- syscall.SIGTERM // what HandleSignals relays from the kubelet
	rep := d.ServeSignals(context.Background(), sigs)

	for _, e := range rep.Preserve.Entries {
		fmt.Println(e.ID, e.Outcome, "after", e.Attempts, "attempt(s)")
	}
	fmt.Println("lost:", rep.Lost(), "err:", rep.Err())
	// Output:
	// sb-0 preserved after 1 attempt(s)
	// sb-1 preserved after 1 attempt(s)
	// sb-2 preserved after 1 attempt(s)
	// flaky preserved after 2 attempt(s)
	// gone vanished after 1 attempt(s)
	// lost: 0 err: <nil>
}
