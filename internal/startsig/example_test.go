package startsig_test

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/draintest"
	"github.com/drainkit/drainkit/internal/startsig"
	"github.com/drainkit/drainkit/pause"
)

// The kubelet's SIGTERM comes while the server still starts: the server goes on starting,
// then drains at once, its budget counted from the SIGTERM.
func Example() {
	signals := startsig.Catch(nil, "sandboxd") // first thing in main
	defer signals.Stop()

	self, _ := os.FindProcess(os.Getpid())
	_ = self.Signal(syscall.SIGTERM) // the kubelet's, during the start
	<-signals.Arrived()

	// The start goes on: the node, its sandboxes, the Drainer.
	node := draintest.NewNode()
	node.AddN("sb", 3, 10*time.Millisecond)
	budget, _ := deadline.New(30*time.Second, deadline.Config{})
	d, err := drain.New(drain.Config{Budget: budget, Sandboxes: node})
	if err != nil {
		panic(err)
	}
	// Serving starts here.
	rep := signals.Drain(context.Background(), d)
	fmt.Println("preserved:", rep.Preserve.Counts[pause.Preserved], "lost:", rep.Lost())
	fmt.Println("SIGKILL counted from the SIGTERM:", rep.Budget.Kill.Sub(rep.Budget.Start))
	// Output:
	// preserved: 3 lost: 0
	// SIGKILL counted from the SIGTERM: 30s
}
