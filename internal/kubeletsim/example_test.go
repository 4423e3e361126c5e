package kubeletsim_test

import (
	"context"
	"fmt"
	"time"

	"github.com/drainkit/drainkit/internal/kubeletsim"
)

// A pod with a 30 s grace period whose preStop hook returns at once and
// whose process exits on SIGTERM: the kubelet leaves the whole grace
// period after the hook, and no SIGKILL is needed.
func Example() {
	proc := kubeletsim.NewInProcess()
	go func() {
		<-proc.Signals() // SIGTERM: shut down, then exit
		proc.Exit()
	}()
	hook := kubeletsim.HookFunc(func(ctx context.Context) error { return nil })
	tl, err := kubeletsim.Terminate(context.Background(), proc, hook, 30*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println("left after the hook:", tl.Remaining, "killed:", tl.Killed)
	fmt.Println("after a 29.5 s hook:", kubeletsim.Remaining(30*time.Second, 29500*time.Millisecond))
	// Output:
	// left after the hook: 30s killed: false
	// after a 29.5 s hook: 2s
}
