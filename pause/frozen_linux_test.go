package pause_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/pause"
)

// frozenChild names, in the environment of a test binary run again, the
// Run it makes: one whose process the test freezes across its hard
// deadline.
const frozenChild = "DRAINKIT_PAUSE_FROZEN_CHILD"

// frozenPreserves is how many preserves run as the child is frozen.
const frozenPreserves = 16

// Fault: a process frozen across the hard deadline (a container at its
// CPU quota, which the kernel's CFS bandwidth control stops until the
// next period, 100 ms by default; or a loaded node's scheduler holding
// the process's threads for tens of ms) found, as it ran again, both the
// preserves' contexts due to end (at the hard deadline) and the Run's wait
// due to give up (ReturnSlack later): the Run could give up before the
// context package's timer had ended the contexts, or before the
// goroutines it woke had run, and named Preserves that return as their
// context ends "Preserve ignored its context past the deadline;
// abandoned", a hang (Entry.Abandoned, and drain's "a hang, not a slow
// preserve" with SandboxTimeout's advice). The slack now runs from when
// the Run, awake past the hard deadline, has seen the contexts end. Not in
// virtual time: there the contexts end, and the goroutines they wake run,
// at the instant due; a real process frozen is what runs them late.
// Before, 7 of 10 runs had 15 or 16 of the 16 abandoned.
//
//	0       the child starts 16 preserves that return as their context ends,
//	        and is frozen (SIGSTOP) once they run
//	1 s     the hard deadline
//	1.1 s   the child runs again (SIGCONT): its Report, 16 timed out, none abandoned
func TestPreservesOfAProcessFrozenAcrossTheHardDeadlineAreNotAbandoned(t *testing.T) {
	if os.Getenv(frozenChild) != "" {
		runFrozenChild(t)
		return
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^"+t.Name()+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), frozenChild+"=1")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { // a child left frozen by a failure before SIGCONT
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
	})
	lines := bufio.NewScanner(out)
	require.True(t, lines.Scan(), "the child's hard deadline")
	ns, err := strconv.ParseInt(strings.TrimPrefix(lines.Text(), "hard "), 10, 64)
	require.NoError(t, err, lines.Text())
	hard := time.Unix(0, ns)
	require.NoError(t, cmd.Process.Signal(syscall.SIGSTOP))
	stopped := time.Now()
	time.Sleep(time.Until(hard.Add(100 * time.Millisecond)))
	require.NoError(t, cmd.Process.Signal(syscall.SIGCONT))
	require.True(t, stopped.Before(hard), "the child frozen before its hard deadline: %v after", stopped.Sub(hard))
	var rep pause.Report
	for lines.Scan() {
		if j, ok := strings.CutPrefix(lines.Text(), "report "); ok {
			require.NoError(t, json.Unmarshal([]byte(j), &rep))
		}
	}
	require.NoError(t, cmd.Wait())
	require.Len(t, rep.Entries, frozenPreserves)
	for _, e := range rep.Entries {
		assert.Equal(t, pause.TimedOut, e.Outcome, e.ID)
		assert.False(t, e.Abandoned(), "%s returned as its context ended: %s", e.ID, e.Error)
		assert.Equal(t, context.DeadlineExceeded.Error(), e.Error, e.ID)
	}
}

// runFrozenChild is the child's Run: 16 preserves that return as
// their context ends, a hard deadline 1 s away, which it writes once the
// 16 run, then the Report.
func runFrozenChild(t *testing.T) {
	var running sync.WaitGroup
	var sbs []pause.Sandbox
	for i := range frozenPreserves {
		running.Add(1)
		sbs = append(sbs, runningPrompt{prompt{fmt.Sprint("prompt-", i)}, &running})
	}
	p, err := pause.New(pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return sbs, nil }), pause.Config{Limit: frozenPreserves})
	require.NoError(t, err)
	hard := time.Now().Add(time.Second)
	go func() {
		running.Wait()
		fmt.Printf("hard %d\n", hard.UnixNano())
	}()
	ctx, cancel := context.WithDeadline(t.Context(), hard.Add(-500*time.Millisecond))
	defer cancel()
	rep := p.Run(ctx, hard)
	j, err := json.Marshal(rep)
	require.NoError(t, err)
	fmt.Printf("report %s\n", j)
}

// runningPrompt is a prompt that says, on running, that it runs.
type runningPrompt struct {
	prompt
	running *sync.WaitGroup
}

func (p runningPrompt) Preserve(ctx context.Context) error {
	p.running.Done()
	return p.prompt.Preserve(ctx)
}
