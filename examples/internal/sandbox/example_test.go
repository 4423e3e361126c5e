package sandbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/examples/internal/store"
	"github.com/drainkit/drainkit/pause"
)

// A node's running sandboxes are what the pause package preserves; a paused sandbox comes
// back, paused, in the next server process.
func Example() {
	dir, _ := os.MkdirTemp("", "node")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	st, _ := store.Open(filepath.Join(dir, "records"))
	rt := &sandbox.Fake{Dir: filepath.Join(dir, "images"), PauseLatency: 10 * time.Millisecond}
	node, _, _ := sandbox.NewNode(rt, st, nil)
	for range 3 {
		_, _ = node.Create(ctx, 3600)
	}
	p, _ := pause.New(pause.ListFunc(node.Running), pause.Config{Limit: 3})
	rep := p.Run(ctx, time.Now().Add(time.Minute))
	fmt.Println("preserved:", rep.Counts[pause.Preserved])
	node.Close()

	next, _, _ := sandbox.NewNode(rt, st, nil) // the restarted server
	defer next.Close()
	fmt.Println("paused after restart:", next.Count(sandbox.Paused))
	// Output:
	// preserved: 3
	// paused after restart: 3
}
