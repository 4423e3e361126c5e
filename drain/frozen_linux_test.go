package drain

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

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/pause"
)

// frozenDrainChild names, in the environment of this test binary run
// again, the drain it makes: one whose process the test freezes across
// the preserve phase's hard deadline.
const frozenDrainChild = "DRAINKIT_DRAIN_FROZEN_CHILD"

// frozenDrainPreserves is how many preserves run as the child is frozen.
const frozenDrainPreserves = 16

// frozenFor is how long past the hard deadline the child stays frozen:
// row 2680 measured a Run returning up to 444 ms past it at load 10–27.
const frozenFor = 450 * time.Millisecond

// Pinned, not a fault of drain's (row 2680 was pause's): a process frozen
// across the preserve phase's hard deadline (a container at its CPU
// quota, a node at load 10–27) runs again with the Preserver's contexts
// due to end and drain's wait for it due to give up. That wait
// (bounded.Call) counts its 100 ms slack from when it has seen the hard
// deadline's context end, so a Preserver whose preserves return as their
// context ends is not abandoned, however long the freeze: 0 of 20 runs
// (10 of them beside 12 busy loops, load 9), where a slack counted from
// the deadline itself abandoned the Preserver in 5 of 5.
//
//	0        the child's drain starts 16 preserves that return as their
//	         context ends, and is frozen (SIGSTOP) once they run
//	1.5 s    the hard deadline of the preserve phase
//	+450 ms  the child runs again (SIGCONT): the preserve phase timed out,
//	         the Preserver returned, its Report says 16 timed out
func TestPreservePhaseOfAProcessFrozenAcrossTheHardDeadlineIsNotAbandoned(t *testing.T) {
	if os.Getenv(frozenDrainChild) != "" {
		runFrozenDrainChild(t)
		return
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^"+t.Name()+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), frozenDrainChild+"=1")
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
	time.Sleep(time.Until(hard.Add(frozenFor)))
	require.NoError(t, cmd.Process.Signal(syscall.SIGCONT))
	require.True(t, stopped.Before(hard), "the child frozen before its hard deadline: %v after", stopped.Sub(hard))
	var p PhaseReport
	var rep pause.Report
	for lines.Scan() {
		if j, ok := strings.CutPrefix(lines.Text(), "phase "); ok {
			require.NoError(t, json.Unmarshal([]byte(j), &p))
		}
		if j, ok := strings.CutPrefix(lines.Text(), "report "); ok {
			require.NoError(t, json.Unmarshal([]byte(j), &rep))
		}
	}
	require.NoError(t, cmd.Wait())
	assert.NotEqual(t, Abandoned, p.Result, "the Preserver returned as its preserves' contexts ended: %s", p.Error)
	require.Len(t, rep.Entries, frozenDrainPreserves, "the Preserver's Report is the drain's")
	for _, e := range rep.Entries {
		assert.Equal(t, pause.TimedOut, e.Outcome, e.ID)
	}
}

// runFrozenDrainChild is the child's drain: 16 preserves that return as
// their context ends, which write the hard deadline (their context's)
// once the 16 run; then the preserve phase's report and the Preserver's.
func runFrozenDrainChild(t *testing.T) {
	var running sync.WaitGroup
	var once sync.Once
	var sbs []pause.Sandbox
	for i := range frozenDrainPreserves {
		running.Add(1)
		sbs = append(sbs, &untilEnded{id: fmt.Sprint("sb-", i), running: &running, once: &once})
	}
	b, err := deadline.New(2*time.Second, deadline.Config{Margin: 500 * time.Millisecond})
	require.NoError(t, err)
	d, err := New(Config{Budget: b,
		Sandboxes: pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return sbs, nil }),
		Pause:     pause.Config{Limit: frozenDrainPreserves, Estimator: deadline.NewEstimator(100 * time.Millisecond)}})
	require.NoError(t, err)
	rep := d.Shutdown(t.Context())
	j, err := json.Marshal(rep.Phase(PhasePreserve))
	require.NoError(t, err)
	fmt.Printf("phase %s\n", j)
	if rep.Preserve != nil {
		j, err = json.Marshal(rep.Preserve)
		require.NoError(t, err)
		fmt.Printf("report %s\n", j)
	}
}

// untilEnded is a sandbox whose Preserve returns as its context ends; the
// last of them to run writes that context's deadline, the hard one.
type untilEnded struct {
	id      string
	running *sync.WaitGroup
	once    *sync.Once
}

func (s *untilEnded) ID() string { return s.id }

func (s *untilEnded) Preserve(ctx context.Context) error {
	s.running.Done()
	s.running.Wait()
	s.once.Do(func() {
		dl, _ := ctx.Deadline()
		fmt.Printf("hard %d\n", dl.UnixNano())
	})
	<-ctx.Done()
	return ctx.Err()
}
