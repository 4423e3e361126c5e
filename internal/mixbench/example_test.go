package mixbench_test

import (
	"context"
	"fmt"

	"github.com/drainkit/drainkit/internal/mixbench"
	"github.com/drainkit/drainkit/pause"
)

// Run one mix with the adaptive default and read what it moved.
func ExampleRun() {
	sbs := []pause.Sandbox{sized{"a", 16 * mib}, sized{"b", 64 * mib}}
	res, err := mixbench.Run(context.Background(), sbs, pause.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Count, "sandboxes,", res.Bytes/mib, "MiB")
	// Output: 2 sandboxes, 80 MiB
}
