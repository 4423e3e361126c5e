package drain

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/proc/proctest"
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
	child := proctest.Again(t, frozenDrainChild)
	hard := child.Time(t, "hard")
	child.Freeze(t)
	stopped := time.Now()
	time.Sleep(time.Until(hard.Add(frozenFor)))
	child.Thaw(t)
	require.True(t, stopped.Before(hard), "the child frozen before its hard deadline: %v after", stopped.Sub(hard))
	var p PhaseReport
	var rep pause.Report
	child.Decode(t, map[string]any{"phase": &p, "report": &rep})
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

// frozenReturnChild names, in the environment of this test binary run
// again, the drain it makes: one whose process the test freezes while its
// Preserver returns, in the slack after the hard deadline.
const frozenReturnChild = "DRAINKIT_DRAIN_FROZEN_RETURN_CHILD"

// wrapUp is how long the child's Preserver takes to return after the hard
// deadline: well inside drain's slack (pause's Run takes up to 20 ms, and
// its Report).
const wrapUp = 40 * time.Millisecond

// Fault: drain gave up on the Preserver returnSlack (100 ms) after it saw
// the hard deadline's context end, in wall time: a process frozen inside
// that slack (a container at its CPU quota, a loaded node), while its
// Preserver returned, ran again with drain's wait due to give up and the
// Preserver's return due too, and drain could give up first: the preserve
// phase Abandoned, "the Preserver did not return by the hard deadline",
// the Preserver's Report dropped, where nothing hung.
//
//	0               the child's Preserver runs until the hard deadline
//	1.5 s           the hard deadline: the Preserver takes 40 ms to return
//	+20 ms          the child is frozen (SIGSTOP)
//	+320 ms         it runs again (SIGCONT): the Preserver returned, its Report the drain's
func TestPreserverReturningAsItsProcessIsFrozenIsNotAbandoned(t *testing.T) {
	if os.Getenv(frozenReturnChild) != "" {
		runFrozenReturnChild(t)
		return
	}
	child := proctest.Again(t, frozenReturnChild)
	hard := child.Time(t, "hard")
	time.Sleep(time.Until(hard.Add(wrapUp / 2)))
	child.Freeze(t)
	time.Sleep(300 * time.Millisecond)
	child.Thaw(t)
	var p PhaseReport
	preserved := slices.Contains(child.Decode(t, map[string]any{"phase": &p}), "report")
	assert.NotEqual(t, Abandoned, p.Result, "the Preserver returned %v after the hard deadline: %s", wrapUp, p.Error)
	assert.True(t, preserved, "the Preserver's Report is the drain's")
}

// runFrozenReturnChild is the child's drain: a Preserver that writes its
// hard deadline, runs until it and returns wrapUp later; then the
// preserve phase's report, and "report" when the Preserver's is the
// drain's.
func runFrozenReturnChild(t *testing.T) {
	b, err := deadline.New(2*time.Second, deadline.Config{Margin: 500 * time.Millisecond})
	require.NoError(t, err)
	d, err := New(Config{Budget: b, Preserver: wrapsUp{}})
	require.NoError(t, err)
	rep := d.Shutdown(t.Context())
	j, err := json.Marshal(rep.Phase(PhasePreserve))
	require.NoError(t, err)
	fmt.Printf("phase %s\n", j)
	if rep.Preserve != nil {
		fmt.Println("report")
	}
}

// wrapsUp is a Preserver whose Run lasts until the hard deadline and
// returns wrapUp after it.
type wrapsUp struct{}

func (wrapsUp) Run(_ context.Context, hard time.Time) *pause.Report {
	fmt.Printf("hard %d\n", hard.UnixNano())
	time.Sleep(time.Until(hard))
	time.Sleep(wrapUp)
	return &pause.Report{}
}

func (wrapsUp) Limit() int                     { return 1 }
func (wrapsUp) Estimator() *deadline.Estimator { return nil }

// frozenStepChild names, in the environment of this test binary run
// again, the drain it makes: one whose process the test freezes while a
// step returns, in the slack after its deadline.
const frozenStepChild = "DRAINKIT_DRAIN_FROZEN_STEP_CHILD"

// Fault: as for the Preserver above, drain gave up on a step returnSlack
// after it saw the step's context end, in wall time: a process frozen
// inside that slack while the step returned (draingrpc.Step waits 50 ms
// for grpc's Stop after its deadline, "below drain's slack for a step's
// return, so the step's own result is reported") ran again with both due,
// and drain could give up first: the step Abandoned, the drain's exit 1.
//
//	0        the child's step "grpc" runs until its deadline (1.5 s: the last phase)
//	+20 ms   the child is frozen (SIGSTOP), the step returning 50 ms after its deadline
//	+320 ms  it runs again (SIGCONT): the step timed out with its own error
func TestStepReturningAsItsProcessIsFrozenIsNotAbandoned(t *testing.T) {
	if os.Getenv(frozenStepChild) != "" {
		runFrozenStepChild(t)
		return
	}
	child := proctest.Again(t, frozenStepChild)
	time.Sleep(time.Until(child.Time(t, "deadline").Add(20 * time.Millisecond)))
	child.Freeze(t)
	time.Sleep(300 * time.Millisecond)
	child.Thaw(t)
	var p PhaseReport
	child.Decode(t, map[string]any{"phase": &p})
	assert.Equal(t, TimedOut, p.Result, "the step returned 50 ms after its deadline: %s", p.Error)
	assert.Contains(t, p.Error, "grpc's Stop returned")
}

// runFrozenStepChild is the child's drain: no sandboxes, one step that
// writes its deadline, waits for it and returns 50 ms later; then the
// step's report.
func runFrozenStepChild(t *testing.T) {
	b, err := deadline.New(2*time.Second, deadline.Config{Margin: 500 * time.Millisecond})
	require.NoError(t, err)
	grpcLike := step("grpc", 200*time.Millisecond, func(ctx context.Context) error {
		dl, _ := ctx.Deadline()
		fmt.Printf("deadline %d\n", dl.UnixNano())
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond)
		return fmt.Errorf("grpc's Stop returned 50 ms after the deadline: %w", ctx.Err())
	})
	none := pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return nil, nil })
	d, err := New(Config{Budget: b, Sandboxes: none, Steps: []Step{grpcLike},
		Pause: pause.Config{Estimator: deadline.NewEstimator(10 * time.Millisecond)}})
	require.NoError(t, err)
	rep := d.Shutdown(t.Context())
	j, err := json.Marshal(rep.Phase("grpc"))
	require.NoError(t, err)
	fmt.Printf("phase %s\n", j)
}

// frozenReserveChild names, in the environment of this test binary run
// again, the drain it makes: one whose process a request's handler
// freezes inside the HTTP step's reserve, between two operations its
// gate counts.
const frozenReserveChild = "DRAINKIT_DRAIN_FROZEN_RESERVE_CHILD"

const (
	reserveFrozen = 400 * time.Millisecond // longer than the step's reserve, 250 ms
	uploadRest    = 5 * time.Millisecond   // the handler's work, uncounted, once its process runs again
)

// Fault: the HTTP step's reserve (HTTPServerStep, NewServer's http: the
// quiet time after the last operation its gate counted, past which what
// the server still serves is cut) ran in wall time: a process frozen
// inside it (a container at its CPU quota, a loaded node) ran again with
// the reserve run out and a handler's next operation due too, and the
// reserve's end came first: a request whose handler checkpointed a
// sandbox (exempt), uploaded its image (no operation of the gate's) and
// was to delete it (exempt) had its connection closed before the delete
// began, the step failed blaming "a request the gate does not count".
// The reserve is now time the process was seen to run (internal/bounded).
// The handler freezes its process itself (SIGSTOP) in the reserve.
//
//	0         a migrate request: its checkpoint ends; SIGTERM: the steps run
//	+20 ms    the http step began (reserve 250 ms); the handler's upload freezes the process
//	+400 ms   the test lets it run (SIGCONT): the upload ends 5 ms later, the delete
//	          runs; the client gets "migrated", the step is ok
func TestHTTPStepReserveOfAProcessFrozenInItDoesNotCutTheNextOperation(t *testing.T) {
	if os.Getenv(frozenReserveChild) != "" {
		runFrozenReserveChild(t)
		return
	}
	child := proctest.Again(t, frozenReserveChild)
	child.HoldStops(t, 1, reserveFrozen)
	var answer struct{ Body, Err string }
	var p PhaseReport
	child.Decode(t, map[string]any{"answer": &answer, "phase": &p})
	assert.Empty(t, answer.Err, "the request was cut")
	assert.Equal(t, "migrated", answer.Body)
	assert.Equal(t, OK, p.Result, "%s", p.Error)
}

// runFrozenReserveChild is the child's drain: a server on loopback whose
// one request checkpoints (exempt), then, once the http step began,
// uploads for 20 ms, freezes its process, uploads 5 ms more and deletes
// (exempt); its client; a step that says the http step is next; then the
// client's answer and the http step's report.
func runFrozenReserveChild(t *testing.T) {
	g := &Gate{Exempt: []Class{Checkpoint, Delete}}
	httpNext := make(chan struct{})
	entered := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		if err := gateOp(g, Checkpoint); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		<-httpNext
		time.Sleep(20 * time.Millisecond) // the image's upload, no operation of the gate's, in the step's reserve
		if err := proctest.FreezeSelf(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		time.Sleep(uploadRest)
		if err := gateOp(g, Delete); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "migrated")
	})}
	b, err := deadline.New(5*time.Second, deadline.Config{Margin: 500 * time.Millisecond})
	require.NoError(t, err)
	mark := step("mark", 10*time.Millisecond, func(context.Context) error { close(httpNext); return nil })
	none := pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return nil, nil })
	d, err := New(Config{Budget: b, Gate: g, Sandboxes: none,
		Steps: []Step{mark, HTTPServerStep("http", srv, 250*time.Millisecond)}, // before srv serves
		Pause: pause.Config{Estimator: deadline.NewEstimator(10 * time.Millisecond)}})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	answers := make(chan struct{ Body, Err string }, 1)
	go func() {
		var a struct{ Body, Err string }
		a.Body, a.Err = get("http://" + ln.Addr().String() + "/migrate")
		answers <- a
	}()
	<-entered
	rep := d.Shutdown(t.Context())
	for prefix, v := range map[string]any{"answer": <-answers, "phase": rep.Phase("http")} {
		j, err := json.Marshal(v)
		require.NoError(t, err)
		fmt.Printf("%s %s\n", prefix, j)
	}
	require.ErrorIs(t, <-served, http.ErrServerClosed)
}

// gateOp is an operation of class c through g, of no time.
func gateOp(g *Gate, c Class) error {
	leave, err := g.Enter(c)
	if err != nil {
		return err
	}
	leave()
	return nil
}

// get returns the body of a GET of url, or its error.
func get(url string) (body, errText string) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return string(b), err.Error()
	}
	return string(b), ""
}
