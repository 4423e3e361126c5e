package escalate_test

import (
	"context"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/drainkit/drainkit/pause"
	"github.com/drainkit/drainkit/pause/escalate"
)

// A gVisor sandbox stopped through the runsc CLI: SIGTERM asks it to save
// itself, and the Policy escalates to SIGKILL when it does not exit.
// (Compiled, not run: it needs runsc and a running sandbox.)
func Example_runsc() {
	id := "sb-1"
	runsc := func(ctx context.Context, args ...string) error {
		return exec.CommandContext(ctx, "runsc", append([]string{"--root", "/run/runsc"}, args...)...).Run()
	}
	kill := func(ctx context.Context, sig syscall.Signal) error {
		return runsc(ctx, "kill", id, strconv.Itoa(int(sig)))
	}
	wait := func(ctx context.Context) error { return runsc(ctx, "wait", id) }
	state := func(ctx context.Context) (bool, error) { return runsc(ctx, "state", id) != nil, nil }

	target := escalate.Funcs{SignalFunc: kill, WaitFunc: wait, ExitedFunc: state} // runsc kill / wait / state
	sb := &escalate.Sandbox{Name: id, Target: target, Policy: escalate.Policy{KillWait: 2 * time.Second}}
	// sb is a pause.Sandbox: list it from the server's pause.Lister
	var _ pause.Sandbox = sb
}
