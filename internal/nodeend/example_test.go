package nodeend_test

import (
	"fmt"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/nodeend"
)

// A node-shutdown slice of 4 s on a 30 s grace, margin 500 ms: SIGTERM at
// 2.7 s leaves the kubelet's SIGKILL at 4.7 s, past the node's end; the
// budget's deadline keeps its margin before that end.
func Example() {
	b, _ := deadline.New(30*time.Second, deadline.Config{Margin: 500 * time.Millisecond})
	t0 := time.Now()
	b.OnPreStop(t0)
	end := t0.Add(4 * time.Second)
	b.Tighten(end)
	nodeend.Set(b, end)
	b.OnSIGTERM(t0.Add(2700 * time.Millisecond))
	fmt.Println("SIGKILL at", b.Kill().Sub(t0), "deadline at", b.Deadline().Sub(t0))
	// Output: SIGKILL at 4.7s deadline at 3.5s
}
