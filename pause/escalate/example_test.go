package escalate_test

import (
	"context"
	"fmt"
	"os/exec"
	"time"

	"github.com/drainkit/drainkit/pause/escalate"
)

// Stop a process that saves its state on SIGTERM: `sleep` simply exits.
// For gVisor, the target would be escalate.Funcs over `runsc kill`,
// `runsc wait` and `runsc state`.
func ExamplePolicy_Stop() {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		fmt.Println("no sleep binary:", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	exit, err := escalate.Policy{TermWait: 5 * time.Second, KillWait: 2 * time.Second}.Stop(ctx, escalate.Cmd(cmd))
	fmt.Println(exit, err)
	// Output: exited <nil>
}
