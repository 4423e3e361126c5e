package fakesandbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/pause"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A fake node through a Preserver: three sandboxes, one failing once.
func Example() {
	node := fakesandbox.NewNode()
	node.AddN("sb", 2, 10*time.Millisecond)
	node.Add(&fakesandbox.Sandbox{Name: "flaky", Latency: 10 * time.Millisecond,
		Faults: []fakesandbox.Fault{fakesandbox.Transient}})
	p, err := pause.New(node, pause.Config{BackOff: func() backoff.BackOff {
		return backoff.NewConstantBackOff(10 * time.Millisecond)
	}})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rep := p.Run(ctx, time.Time{})
	for _, e := range rep.Entries {
		fmt.Println(e.ID, e.Outcome, e.Attempts)
	}
	// Output:
	// sb-0 preserved 1
	// sb-1 preserved 1
	// flaky preserved 2
}
