package escalate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/drainkit/drainkit/pause"
	"github.com/drainkit/drainkit/pause/escalate"
)

// runscTarget is container id of the runsc state directory root as a Target, over the
// runsc CLI, as Funcs' contract asks (row 974):
//
//   - SIGTERM goes to the container's init (`runsc kill ID 15`, as containerd does), which
//     has its workload save; SIGKILL to every process (`runsc kill --all ID 9`);
//   - runsc's words for a container that has exited or that it no longer knows ("sandbox
//     is not running", "sandbox no longer running", "does not exist") are
//     os.ErrProcessDone: a kill that finds the sandbox gone sent nothing (Gone), and a
//     wait that fails so has seen the end;
//   - Exited reads the state runsc prints: "stopped" has exited. `runsc state` succeeds
//     for a stopped container, and a state that fails (its context's deadline cut it)
//     says nothing: taken for "exited", a sandbox that ignored SIGTERM was never
//     SIGKILLed once a reaper had stolen the wait;
//   - a command whose exit status a reaper stole keeps ECHILD in its error, which the
//     Policy reads.
func runscTarget(root, id string) escalate.Funcs {
	runsc := func(ctx context.Context, args ...string) ([]byte, error) {
		var stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, "runsc", append([]string{"--root", root}, args...)...)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err == nil {
			return out, nil
		}
		msg := strings.TrimSpace(stderr.String())
		for _, gone := range []string{"sandbox is not running", "sandbox no longer running", "does not exist"} {
			if strings.Contains(msg, gone) {
				return out, fmt.Errorf("runsc %s: %s: %w", args[0], msg, os.ErrProcessDone)
			}
		}
		return out, fmt.Errorf("runsc %s: %w: %s", args[0], err, msg)
	}
	kill := func(ctx context.Context, sig syscall.Signal) error {
		if sig == syscall.SIGKILL {
			_, err := runsc(ctx, "kill", "--all", id, strconv.Itoa(int(sig)))
			return err
		}
		_, err := runsc(ctx, "kill", id, strconv.Itoa(int(sig)))
		return err
	}
	wait := func(ctx context.Context) error { _, err := runsc(ctx, "wait", id); return err }
	state := func(ctx context.Context) (bool, error) {
		out, err := runsc(ctx, "state", id)
		if errors.Is(err, os.ErrProcessDone) {
			return true, nil // runsc no longer knows it
		}
		var st struct{ Status string }
		if err == nil {
			err = json.Unmarshal(out, &st)
		}
		return st.Status == "stopped", err
	}
	return escalate.Funcs{SignalFunc: kill, WaitFunc: wait, ExitedFunc: state}
}

// A gVisor sandbox stopped through the runsc CLI (runscTarget): SIGTERM asks it to save
// itself, and the Policy escalates to SIGKILL when it does not exit. (Compiled, not run:
// it needs runsc and a running sandbox; TestRunscWiring runs runscTarget on real ones.)
func Example_runsc() {
	id := "sb-1"
	target := runscTarget("/run/runsc", id)
	sb := &escalate.Sandbox{Name: id, Target: target, Policy: escalate.Policy{KillWait: 2 * time.Second}}
	// sb is a pause.Sandbox: list it from the server's pause.Lister
	var _ pause.Sandbox = sb
}
