package pause_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/bounded"
	"github.com/drainkit/drainkit/internal/proc/proctest"
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
	child := proctest.Again(t, frozenChild)
	hard := child.Time(t, "hard")
	child.Freeze(t)
	stopped := time.Now()
	time.Sleep(time.Until(hard.Add(100 * time.Millisecond)))
	child.Thaw(t)
	require.True(t, stopped.Before(hard), "the child frozen before its hard deadline: %v after", stopped.Sub(hard))
	rep := frozenReport(t, child)
	assert.Empty(t, abandonedOf(t, rep), "returned as their context ended")
	for _, e := range rep.Entries {
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
	hard := time.Now().Add(time.Second)
	go func() {
		running.Wait()
		fmt.Printf("hard %d\n", hard.UnixNano())
	}()
	runAndReport(t, sbs, hard)
}

// frozenReport reads a frozen child's Report to the child's end and
// requires an entry for each of its preserves.
func frozenReport(t *testing.T, child *proctest.Child) pause.Report {
	t.Helper()
	var rep pause.Report
	child.Decode(t, map[string]any{"report": &rep})
	require.Len(t, rep.Entries, frozenPreserves)
	return rep
}

// abandonedOf asserts that each of a frozen child's preserves timed out
// (its context ended: the hard deadline) and returns those abandoned, each
// as its ID and error.
func abandonedOf(t *testing.T, rep pause.Report) (abandoned []string) {
	t.Helper()
	for _, e := range rep.Entries {
		assert.Equal(t, pause.TimedOut, e.Outcome, e.ID)
		if e.Abandoned() {
			abandoned = append(abandoned, e.ID+": "+e.Error)
		}
	}
	return abandoned
}

// runAndReport is a frozen child's Run of sbs, all at once, to the hard
// deadline hard, its phase ending 500 ms before it; then its Report, as
// the line "report JSON", and the instant the Run returned, as "returned
// JSON".
func runAndReport(t *testing.T, sbs []pause.Sandbox, hard time.Time) {
	p, err := pause.New(pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return sbs, nil }), pause.Config{Limit: frozenPreserves})
	require.NoError(t, err)
	ctx, cancel := context.WithDeadline(t.Context(), hard.Add(-500*time.Millisecond))
	defer cancel()
	rep := p.Run(ctx, hard)
	returned := time.Now()
	printJSON(t, "report", rep)
	printJSON(t, "returned", returned)
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

// frozenSlackChild names, in the environment of a test binary run again,
// the Run it makes: one whose process freezes itself inside the slack its
// wait gives the preserves past the hard deadline.
const frozenSlackChild = "DRAINKIT_PAUSE_FROZEN_SLACK_CHILD"

// slackWrapUp is how long the child's Preserves take to return once their
// process runs again, frozen as their contexts ended: inside ReturnSlack
// (20 ms) of the time the process ran, Preserves that heed their context.
const slackWrapUp = 5 * time.Millisecond

// Fault: the Run gave up on its preserves ReturnSlack after it saw their
// contexts end, counted in wall time: a process frozen inside that slack
// (a container at its CPU quota, a loaded node) while its Preserves
// returned ran again with the Run's wait due to give up and their returns
// due too, and the wait could give up first: Preserves that returned in
// time named "Preserve ignored its context past the deadline; abandoned",
// a hang (Entry.Abandoned). The slack now runs from when the Run, awake
// past the hard deadline, has seen the contexts end, and counts the time
// it saw pass on time (internal/bounded's, since row 3021). The
// child freezes itself (SIGSTOP) as the first Preserve sees its context
// end, so the freeze falls at the slack's start however loaded the machine.
//
//	0        the child starts 16 preserves that return 5 ms after they see their context end
//	1 s      the hard deadline: their contexts end, the first to see it freezes the process
//	+300 ms  the test lets it run (SIGCONT): its Report, 16 timed out, none abandoned
func TestPreservesReturningAsTheirProcessIsFrozenInTheSlackAreNotAbandoned(t *testing.T) {
	if os.Getenv(frozenSlackChild) != "" {
		runFrozenSlackChild(t)
		return
	}
	child := proctest.Again(t, frozenSlackChild)
	child.HoldStops(t, 1, 300*time.Millisecond)
	assert.Empty(t, abandonedOf(t, frozenReport(t, child)), "of %d Preserves returning %v after their process ran again, abandoned", frozenPreserves, slackWrapUp)
}

// runFrozenSlackChild is the child's Run: 16 preserves that freeze the
// process as the first sees its context end and return slackWrapUp after
// it runs again, a hard deadline 1 s away; then the Report.
func runFrozenSlackChild(t *testing.T) {
	onOneP()
	var freeze sync.Once
	var sbs []pause.Sandbox
	for i := range frozenPreserves {
		sbs = append(sbs, wrapsUp{prompt{fmt.Sprint("wraps-up-", i)}, &freeze})
	}
	runAndReport(t, sbs, time.Now().Add(time.Second))
}

// wrapsUp is a prompt whose Preserve, once its context ends, freezes its
// process if none of the others did (proctest.FreezeSelf: at this point of
// its run, where a kill(2) of the process let it run on for tens of ms
// under load), and returns slackWrapUp after it runs again, as one that
// heeds its context but has to finish a write.
type wrapsUp struct {
	prompt
	freeze *sync.Once
}

func (w wrapsUp) Preserve(ctx context.Context) error {
	err := w.prompt.Preserve(ctx)
	w.freeze.Do(func() { _ = proctest.FreezeSelf() })
	time.Sleep(slackWrapUp)
	return err
}

// frozenAgainChild names, in the environment of a test binary run again,
// the Run it makes: one whose process its Preserves freeze again and
// again inside the slack its wait gives them past the hard deadline.
const frozenAgainChild = "DRAINKIT_PAUSE_FROZEN_AGAIN_CHILD"

const (
	againFreezes = 3                      // of the process, as its Preserves return
	againFrozen  = 100 * time.Millisecond // each: longer than ReturnSlack
	againRun     = 3 * time.Millisecond   // the Preserves' run before each freeze, and after the last
)

// Fault: past row 2940 the Run's slack (ReturnSlack, 20 ms) was waited in
// two halves, the second from when the Run, awake past the first, had
// seen it end: one freeze per half. A process frozen again inside the
// second half (a container at its CPU quota, stopped every period; a
// loaded node) ran again with the Run's wait due to give up and its
// Preserves' returns due too, and the wait could give up first:
// Preserves that heed their context, needing 12 ms of the 20, named
// "Preserve ignored its context past the deadline; abandoned", a hang.
// The Run's slack is now internal/bounded's: the time it saw pass on
// time, however many freezes. The first Preserve to come to each freeze
// makes it (SIGSTOP), so the freezes fall where they must however
// loaded the machine.
//
// That promise holds while the slack is counted within its wall bound
// (internal/bounded's WallBound, 1.08 s for ReturnSlack): at its
// waiter's first wake past the bound the slack's last stretch begins,
// the rest of it in one, and a freeze that begins after that ends it as
// the process runs again. So the test asserts it where the child's last
// freeze began before the bound (row 3641). A loaded machine stretches
// each freeze: beside 24 busy loops (load 25 to 40) one held for 100 ms
// lasted up to 856 ms, the child seen stopped 720 ms after its SIGSTOP,
// running 411 ms after its SIGCONT; the bound passed inside the last
// freeze in 3 of 25 runs, and where it passes before it, as with each
// freeze held 600 ms, all 16 are abandoned. There the slack promises
// only that it gives up at its last stretch, no sooner than the bound.
//
//	0            the child starts 16 preserves that, once their context ends, run 3 ms
//	             and freeze the process, 3 times, and return 3 ms after the last
//	1 s          the hard deadline: their contexts end; the first freeze 3 ms later
//	+100 ms ×3   the test lets it run (SIGCONT) each time
//	then         its Report: 16 timed out; none abandoned where the last freeze began
//	             before the bound (1 s + 1.08 s), or the Run returned past the bound
func TestPreservesReturningAsTheirProcessIsFrozenAgainAndAgainAreNotAbandoned(t *testing.T) {
	if os.Getenv(frozenAgainChild) != "" {
		runFrozenAgainChild(t)
		return
	}
	child := proctest.Again(t, frozenAgainChild)
	child.HoldStops(t, againFreezes, againFrozen)
	var rep pause.Report
	var hard, lastFreeze, returned time.Time
	child.Decode(t, map[string]any{"report": &rep, "hard": &hard, "lastfreeze": &lastFreeze, "returned": &returned})
	require.Len(t, rep.Entries, frozenPreserves)
	abandoned := abandonedOf(t, rep)

	// The slack begins once the Run has seen the contexts end, at the
	// hard deadline or later: its bound is no sooner than this.
	bound := hard.Add(bounded.WallBound(pause.ReturnSlack))
	if lastFreeze.Before(bound) {
		assert.Empty(t, abandoned, "of %d Preserves needing %v of the slack, their process frozen %d times, the last %v after the hard deadline, abandoned",
			frozenPreserves, (againFreezes+1)*againRun, againFreezes, lastFreeze.Sub(hard))
		return
	}
	t.Logf("the machine held the child so long that its last freeze began %v after the hard deadline, past the slack's wall bound (%v): %d abandoned",
		lastFreeze.Sub(hard), bound.Sub(hard), len(abandoned))
	if len(abandoned) > 0 {
		assert.False(t, returned.Before(bound), "Preserves abandoned %v after the hard deadline, before the slack's wall bound (%v)", returned.Sub(hard), bound.Sub(hard))
	}
}

// runFrozenAgainChild is the child's Run: 16 preserves that freeze the
// process 3 times as they return (freezesAgain), a hard deadline 1 s
// away; then the Report. It writes the hard deadline at once, as "hard
// JSON", and the instant its last freeze begins.
func runFrozenAgainChild(t *testing.T) {
	onOneP()
	freezes := make([]sync.Once, againFreezes)
	var sbs []pause.Sandbox
	for i := range frozenPreserves {
		sbs = append(sbs, freezesAgain{prompt{fmt.Sprint("freezes-again-", i)}, freezes})
	}
	hard := time.Now().Add(time.Second)
	printJSON(t, "hard", hard)
	runAndReport(t, sbs, hard)
}

// printJSON writes v as the child's line "prefix JSON".
func printJSON(t *testing.T, prefix string, v any) {
	j, err := json.Marshal(v)
	require.NoError(t, err)
	fmt.Printf("%s %s\n", prefix, j)
}

// freezesAgain is a prompt whose Preserve, once its context ends, runs
// againRun and freezes its process, unless another did this freeze,
// againFreezes times, and returns againRun after the last: one that
// heeds its context but has writes to finish, in a process stopped again
// and again. The one that makes the last freeze writes when it began, as
// "lastfreeze JSON".
type freezesAgain struct {
	prompt
	freezes []sync.Once
}

func (f freezesAgain) Preserve(ctx context.Context) error {
	err := f.prompt.Preserve(ctx)
	for i := range f.freezes {
		time.Sleep(againRun)
		f.freezes[i].Do(func() {
			if i == len(f.freezes)-1 {
				began, _ := json.Marshal(time.Now()) // a time.Time of this year marshals
				fmt.Printf("lastfreeze %s\n", began)
			}
			_ = proctest.FreezeSelf()
		})
	}
	time.Sleep(againRun)
	return err
}

// onOneP runs the rest of a frozen child's Run on one P (GOMAXPROCS=1),
// so that the Run's wait sees every hold of its Preserves: the slack
// counts the time the wait saw pass on time (internal/bounded), which
// stands for its Preserves' only when they run where it runs. After a
// thaw a loaded machine's scheduler can hold one thread of the process
// while another runs on: the thread that froze the process, its
// goroutine in the raw system call with its P (proctest.FreezeSelf), was
// resumed 40 to 60 ms after the thaw beside 12 busy loops, while the
// wait, on another thread, counted its 20 ms on time, and the Preserves
// behind the freeze's sync.Once, all 16, were named abandoned (3 of 40
// runs). No wait can see a thread held so; with one P, the thread
// holding the Preserves holds the wait too, and the test asserts what
// the slack promises: Preserves that need less of it than the process
// ran are not abandoned.
func onOneP() { runtime.GOMAXPROCS(1) }
