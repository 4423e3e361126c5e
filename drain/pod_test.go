package drain

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	eventsv1 "k8s.io/api/events/v1"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/draintest"
	"github.com/drainkit/drainkit/internal/fakeapiserver"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/kube"
	"github.com/drainkit/drainkit/pause"
)

// podAPI is an API server on loopback holding the pod sandboxd-0.
type podAPI struct {
	*fakeapiserver.Pod
	cfg kube.Config
}

func newPodAPI(t *testing.T) *podAPI {
	t.Helper()
	a := &podAPI{Pod: &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv", UID: "uid-0"}}
	_, a.cfg = fakeapiserver.Start(t, a.Pod, "agentenv", "t")
	return a
}

// verdict is a step's Detail that summarises itself, as ublk's Report does.
type verdict string

func (v verdict) String() string { return "ublk teardown: " + string(v) }

func TestPodTightensTheBudgetAndTheEventsTellTheDrain(t *testing.T) {
	api := newPodAPI(t)
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	pod, err := kube.New("sandboxd-0", api.cfg)
	require.NoError(t, err)
	f := newFixture(t, fixtureOpts{grace: time.Hour, margin: time.Second, sandboxes: 2, latency: time.Millisecond,
		steps: []Step{
			NewStep(stepPhase("ublk", time.Second), func(context.Context) (any, error) { return verdict("stopped"), nil }),
			step("http", time.Second, func(context.Context) error { return errors.New("listener stuck") }),
		},
		edit: func(c *Config) { c.Pod, c.Logger = pod, logger }})
	f.node.Add(&draintest.Sandbox{Name: "broken", Latency: time.Millisecond, Faults: []draintest.Fault{draintest.Permanent}})

	// kubectl delete --grace-period=30 during the hour the manifest gives.
	t0 := time.Now()
	kill := t0.Add(30 * time.Second).Truncate(time.Second)
	api.SetDeletion(kill)
	changed := f.budget.Changed()
	call := f.callPreStop(t.Context(), "?wait=0s")
	<-changed // OnPreStop
	for {
		next := f.budget.Changed() // before the check: a change in between is not missed
		if f.budget.Kill().Equal(kill) {
			break
		}
		<-next // the read of the pod, in the background
	}
	call.wait(t)

	rep := f.d.Shutdown(t.Context())
	// SIGTERM keeps the deletion's SIGKILL (30 s away: past SIGTERM's
	// 2 s floor), whenever the read landed (docs/faults.md row 140).
	assert.True(t, rep.Budget.Kill.Equal(kill), "SIGKILL %v after the deletion's", rep.Budget.Kill.Sub(kill))
	require.NotNil(t, rep.Events)
	assert.Equal(t, kube.EventStats{Posted: 5}, *rep.Events)

	got := api.Events()
	var reasons []string
	for _, ev := range got {
		reasons = append(reasons, ev.Reason)
		assert.Equal(t, "sandboxd-0", ev.Regarding.Name)
		assert.Equal(t, "uid-0", string(ev.Regarding.UID))
		assert.Equal(t, "drainkit", ev.ReportingController)
	}
	require.Equal(t, []string{"DrainStarted", "SandboxesLost", "StepFinished", "StepFailed", "DrainFinished"}, reasons)
	byReason := map[string]eventsv1.Event{}
	for _, ev := range got {
		byReason[ev.Reason] = ev
	}
	assert.Contains(t, byReason["DrainStarted"].Note, "preStop hook called")
	assert.Contains(t, byReason["DrainStarted"].Note, "preserve until T0+")
	assert.Equal(t, kube.Warning, byReason["SandboxesLost"].Type)
	assert.Contains(t, byReason["SandboxesLost"].Note, "1 of 3 sandboxes not preserved: broken(failed)")
	assert.Equal(t, "ublk", byReason["StepFinished"].Action)
	assert.Contains(t, byReason["StepFinished"].Note, "ublk teardown: stopped")
	assert.Equal(t, kube.Warning, byReason["StepFailed"].Type)
	assert.Contains(t, byReason["StepFailed"].Note, "listener stuck")
	assert.Equal(t, kube.Warning, byReason["DrainFinished"].Type)
	assert.Contains(t, byReason["DrainFinished"].Note, "2 of 3 sandboxes preserved, 1 lost")
	assert.Contains(t, logs.String(), "tightened=true")
}

func stepPhase(name string, reserve time.Duration) deadline.Phase {
	return deadline.Phase{Name: name, Reserve: deadline.Fixed(reserve)}
}

func TestPodThatRefusesEverythingDoesNotHoldUpTheDrain(t *testing.T) {
	for name, tc := range map[string]struct {
		set  func(*podAPI)
		read string // what the log says of the read of the pod
	}{
		"RBAC denies": {func(a *podAPI) { a.Refuse(http.StatusForbidden) }, "the budget stands"},
		// The read is still waiting when the drain ends and stops it: no
		// warning of its own (the drain ended as it should), the dropped
		// Events are the API server's.
		"API hangs": {func(a *podAPI) { a.Hang() }, ""},
	} {
		t.Run(name, func(t *testing.T) {
			api := newPodAPI(t)
			tc.set(api)
			var logs logbuf.Buffer
			cfg := api.cfg
			cfg.EventTimeout = time.Hour // a hung POST ends only when Shutdown's flush ends it
			pod, err := kube.New("sandboxd-0", cfg)
			require.NoError(t, err)
			var steps []Step
			out := io.Writer(&logs)
			if tc.read != "" { // the answer comes before the drain ends and stops the read
				read := logbuf.NewSignal(tc.read)
				out = io.MultiWriter(&logs, read)
				steps = append(steps, step("answered", time.Second, func(context.Context) error {
					select {
					case <-read.Seen():
					case <-time.After(10 * time.Second): // a hang guard, not a timing assertion
					}
					return nil
				}))
			}
			f := newFixture(t, fixtureOpts{grace: time.Hour, margin: time.Second, sandboxes: 3, latency: time.Millisecond, steps: steps,
				edit: func(c *Config) { c.Pod, c.Logger = pod, slog.New(slog.NewTextHandler(out, nil)) }})
			rep := f.d.Shutdown(t.Context())
			require.NoError(t, rep.Err())
			assert.Equal(t, 3, rep.Preserve.Counts[pause.Preserved])
			require.NotNil(t, rep.Events)
			assert.Zero(t, rep.Events.Posted)
			assert.Equal(t, 2+len(steps), rep.Events.Dropped) // DrainStarted, DrainFinished, StepFinished
			assert.Equal(t, time.Hour, rep.Budget.Kill.Sub(rep.Budget.SIGTERM), "the manifest's grace stands")
			assert.Contains(t, logs.String(), "Kubernetes Events dropped")
			if tc.read != "" {
				assert.Contains(t, logs.String(), tc.read)
			} else {
				assert.NotContains(t, logs.String(), "the budget stands")
			}
		})
	}
}

// Fault: a preserve phase that left no pause Report (here the Preserver
// returned none) posted no SandboxesLost and a DrainFinished without a
// count, though the drain had counted three sandboxes running: the pod's
// events said nothing of them.
func TestPreserverWithoutAReportPostsTheUnaccountedSandboxes(t *testing.T) {
	api := newPodAPI(t)
	pod, err := kube.New("sandboxd-0", api.cfg)
	require.NoError(t, err)
	f := newFixture(t, fixtureOpts{grace: time.Hour, margin: time.Second, sandboxes: 3, latency: time.Millisecond,
		edit: func(c *Config) { c.Pod, c.Preserver = pod, brokenPreserver{} }})
	rep := f.d.Shutdown(t.Context())
	require.Nil(t, rep.Preserve)
	byReason := map[string]eventsv1.Event{}
	for _, ev := range api.Events() {
		byReason[ev.Reason] = ev
	}
	require.Contains(t, byReason, "SandboxesLost")
	assert.Equal(t, kube.Warning, byReason["SandboxesLost"].Type)
	assert.Contains(t, byReason["SandboxesLost"].Note, "3 sandboxes unaccounted for")
	assert.Contains(t, byReason["SandboxesLost"].Note, "the Preserver returned no report")
	assert.Equal(t, kube.Warning, byReason["DrainFinished"].Type)
	assert.Contains(t, byReason["DrainFinished"].Note, "3 sandboxes unaccounted for")
}

func TestNoPodNoEvents(t *testing.T) {
	f := newFixture(t, fixtureOpts{grace: time.Minute, margin: time.Second, sandboxes: 1, latency: time.Millisecond})
	rep := f.d.Shutdown(t.Context())
	assert.Nil(t, rep.Events)
	data, err := json.Marshal(rep)
	require.NoError(t, err)
	assert.False(t, strings.Contains(string(data), `"events"`))
}

// Fault (docs/faults.md row 47): a second `kubectl delete --grace-period=3`
// during an hour's preStop wait, and a kubelet that runs the termination
// again with the shorter grace, the hook included, timed from its new
// start: a second preStop call (the kubelet v1.34 keeps the first grace
// and runs no hook again, row 229; a restarted kubelet runs it again). The Drainer read the pod's deletion only at the
// first call and at SIGTERM, so its wait went on for the hour; the
// kubelet gave up on the hook when the short grace ran out, and SIGTERM
// left its 2 s for every sandbox and step. A later preStop call reads the
// deletion again (once per hook run: an exec hook's polls, which carry the
// same ?start=, do not), and the budget follows the new run (row 228).
//
//	0 s     first delete (grace 1 h): preStop call 1, its wait planned for the hour
//	...     kubectl delete --grace-period=3: the kubelet runs the hook again
//	        (an exec hook started at s2): preStop call 2, SIGKILL s2 + 3 s
//	~2 s    the wait ends at the new drain deadline; both calls answer
func TestPreStopCalledAgainReadsTheShorterDeletion(t *testing.T) {
	api := newPodAPI(t)
	pod, err := kube.New("sandboxd-0", api.cfg)
	require.NoError(t, err)
	f := newFixture(t, fixtureOpts{grace: time.Hour, margin: time.Second, sandboxes: 2, latency: time.Millisecond,
		edit: func(c *Config) { c.Pod = pod }})
	api.Delete(time.Now(), time.Hour) // the first delete, with the manifest's grace
	first := time.Now().Add(time.Hour).Truncate(time.Second)

	call := f.callPreStop(t.Context(), "")
	for { // the first call's read tightens the hour by the call's latency
		next := f.budget.Changed()
		if !f.budget.Kill().After(first) {
			break
		}
		<-next
	}

	s2 := time.Now()
	api.Delete(s2, 3*time.Second)
	f.callPreStop(t.Context(), "?wait=0s&start="+url.QueryEscape(s2.Format(time.RFC3339Nano))).wait(t) // the kubelet's re-run of the hook
	f.d.podReads.Wait()                                                                                // every read a call started is over
	second := s2.Add(3 * time.Second).Round(0)                                                         // as the hook sent it: by the wall clock
	if !assert.True(t, f.budget.Kill().Equal(second), "the re-run's call read the shorter deletion: SIGKILL %v after the new run's",
		f.budget.Kill().Sub(second)) {
		f.d.Shutdown(t.Context()) // ends the wait, planned for the hour
		return
	}

	sum := call.wait(t)
	assert.Equal(t, reasonDeadline, sum.Reason)
	assert.True(t, sum.End.Before(second), "the wait ended before the new SIGKILL, not at the hour")

	gets := api.Reads()
	f.callPreStop(t.Context(), "?wait=0s&start="+url.QueryEscape(s2.Format(time.RFC3339Nano))).wait(t) // its next poll
	f.d.podReads.Wait()
	assert.Equal(t, gets, api.Reads(), "one read per hook run, not per poll")
	rep := f.d.Shutdown(t.Context())
	// SIGTERM's arithmetic from the new run: 3 s less its whole seconds, at least 2 s
	want := rep.Budget.SIGTERM.Add(deadline.KubeletRemaining(3*time.Second, rep.Budget.SIGTERM.Sub(s2)))
	assert.True(t, rep.Budget.Kill.Equal(want), "SIGTERM keeps the new run's SIGKILL, not the hour: SIGKILL %v after %v",
		rep.Budget.Kill.Sub(want), want)
	assert.True(t, rep.Budget.Restart.Equal(s2.Round(0)), "the Report's budget names the new run")
}

// Fault (docs/faults.md row 228): the hook run again after a second,
// shorter deletion. The API server moves the deletionTimestamp to the
// FIRST deletion's time plus the new grace (k8s.io/apiserver's
// rest.BeforeDelete; internal/realapiserver checks it); a kubelet that
// runs the hook again (a restarted one, or one that honoured the deletion:
// the kubelet v1.34 does not) times the grace from the new run. The
// Drainer tightened its budget to the deletionTimestamp: SIGKILL planned
// 600 s before the kubelet's, the wait cut short, and the preserve phase
// left 10 min early by a deadline that was not the kubelet's.
//
// A restarted kubelet's first call ends with the old kubelet (its
// connection closed: an httpGet's, an exec's whose CRI call was
// cancelled); a kubelet that left it open is the other case.
//
//	-600 s  first delete (grace 1 h): the exec hook starts, T0
//	0 s     kubectl delete --grace-period=900: deletionTimestamp 300 s away;
//	        the kubelet restarts and runs the hook again: SIGKILL 900 s away
//	        SIGTERM: the kubelet's arithmetic from the new run
func TestShorterDeletionMovesSIGKILLToTheKubeletsNewRun(t *testing.T) {
	for _, tc := range []struct {
		hook        string
		firstClosed bool
	}{{"exec", false}, {"httpGet", false}, {"exec", true}, {"httpGet", true}} {
		hook := tc.hook
		name := hook + ", first call left open"
		if tc.firstClosed {
			name = hook + ", first call closed with the old kubelet"
		}
		t.Run(name, func(t *testing.T) {
			api := newPodAPI(t)
			pod, err := kube.New("sandboxd-0", api.cfg)
			require.NoError(t, err)
			f := newFixture(t, fixtureOpts{grace: time.Hour, sandboxes: 3, latency: time.Millisecond,
				edit: func(c *Config) { c.Pod = pod }})
			t0 := time.Now().Add(-10 * time.Minute)
			api.Delete(t0, time.Hour)
			startQuery := func(at time.Time) string {
				return "?start=" + url.QueryEscape(at.Format(time.RFC3339Nano))
			}
			first := startQuery(t0)
			if hook == "httpGet" {
				first = ""
			}
			firstCtx, closeFirst := context.WithCancel(t.Context())
			defer closeFirst()
			call := f.callPreStop(firstCtx, first)
			for f.budget.Kill().After(t0.Add(time.Hour)) { // the first read (the hook's call is a little after T0)
				<-f.budget.Changed()
			}
			if tc.firstClosed {
				closeFirst()
				<-call.done
			}

			rerun := time.Now()
			api.Delete(rerun, 900*time.Second)
			var again *preStopCall
			before := time.Now()
			if hook == "exec" {
				again = f.callPreStop(t.Context(), startQuery(rerun)+"&wait=0s")
				again.wait(t)
			} else { // no ?start=, no ?wait=: a run of its own, from its arrival
				again = f.callPreStop(t.Context(), "")
				// Its read: SIGKILL from ~T0+60 min to ~T0+25 min.
				for changed := f.budget.Changed(); f.budget.Kill().After(t0.Add(30 * time.Minute)); changed = f.budget.Changed() {
					<-changed
				}
				// A poll, as an operator's look: no run of its own.
				f.callPreStop(t.Context(), "?wait=0s").wait(t)
				// The new run's call answered before SIGTERM, as the kubelet's is
				// when the wait ends (here near an hour away): the look's answer
				// is not the call's (row 422), and a call open at SIGTERM is the
				// kubelet giving up on the hook.
				f.d.mu.Lock()
				latest := f.d.hooks
				f.d.mu.Unlock()
				f.d.hookClosed(latest)
			}
			f.d.podReads.Wait()
			after := time.Now()
			if hook == "exec" {
				assert.True(t, f.budget.Kill().Equal(rerun.Add(900*time.Second).Round(0)), "SIGKILL %v after the new run's (by the wall clock, as the hook sent it)",
					f.budget.Kill().Sub(rerun.Add(900*time.Second)))
			} else {
				assert.WithinRange(t, f.budget.Kill(), before.Add(900*time.Second), after.Add(900*time.Second))
			}

			rep := f.d.Shutdown(t.Context())
			run := rep.Budget.Restart
			want := rep.Budget.SIGTERM.Add(deadline.KubeletRemaining(900*time.Second, rep.Budget.SIGTERM.Sub(run)))
			assert.True(t, rep.Budget.Kill.Equal(want), "SIGKILL %v after the kubelet's %v", rep.Budget.Kill.Sub(want), want)
			if hook == "exec" {
				assert.True(t, rep.Budget.Start.Equal(t0.Round(0)), "T0 stays the first run's")
			}
			if !tc.firstClosed {
				assert.Equal(t, reasonSIGTERM, call.wait(t).Reason, "the first run's call")
			}
			if hook == "httpGet" {
				assert.Equal(t, reasonSIGTERM, again.wait(t).Reason, "the new run's call")
			}
			assert.Greater(t, rep.Budget.Kill.Sub(rep.Budget.SIGTERM), 890*time.Second, "not the deletionTimestamp's 300 s")
			assert.Equal(t, 3, rep.Preserve.Counts[pause.Preserved])
			require.NoError(t, rep.Err())
		})
	}
}

// Fault (docs/faults.md row 229): a second, shorter deletion while the
// kubelet terminates the pod, its hook not run again. The kubelet's
// termination keeps the grace it started with (v1.34.4, measured:
// internal/realkubelet's TestRealKubeletWithAPIServer/shorter_deletion), but
// the API server moves the deletionTimestamp to the first deletion's time
// plus the new grace, and the Drainer tightened its budget to it at SIGTERM's
// read: SIGKILL planned 45 min early, the preserve phase cut to what fits
// the 15 min it thought were left. Now a later read that finds a shorter
// grace changes nothing, and says so once.
//
//	0 s   the first deletion (1 h): preStop, its read: SIGKILL an hour away
//	      kubectl delete --grace-period=900: the kubelet keeps its hour
//	      SIGTERM: its read finds 900 s; SIGKILL stays the hour's
func TestLaterShorterDeletionLeavesTheBudget(t *testing.T) {
	api := newPodAPI(t)
	pod, err := kube.New("sandboxd-0", api.cfg)
	require.NoError(t, err)
	var logs logbuf.Buffer
	read := logbuf.NewSignal("a second deletion shortened the pod's grace")
	f := newFixture(t, fixtureOpts{grace: time.Hour, sandboxes: 2, latency: time.Millisecond,
		steps: []Step{step("ublk", time.Second, func(ctx context.Context) error {
			select { // SIGTERM's read answers before the drain ends, which would stop it
			case <-read.Seen():
			case <-time.After(10 * time.Second): // a hang guard, not a timing assertion
			}
			return nil
		})},
		edit: func(c *Config) {
			c.Pod, c.Logger = pod, slog.New(slog.NewTextHandler(io.MultiWriter(&logs, read), nil))
		}})
	d1 := time.Now()
	api.Delete(d1, time.Hour)
	first := d1.Add(time.Hour).Truncate(time.Second)
	f.callPreStop(t.Context(), "?wait=0s").wait(t) // an exec hook's poll: answered, the wait goes on
	for f.budget.Kill().After(first) {             // the first read
		<-f.budget.Changed()
	}
	api.Delete(time.Now(), 900*time.Second)
	rep := f.d.Shutdown(t.Context())
	f.d.podReads.Wait()

	assert.True(t, rep.Budget.Kill.Equal(first), "SIGKILL %v after the first deletion's", rep.Budget.Kill.Sub(first))
	assert.True(t, f.budget.Kill().Equal(first), "and after SIGTERM's read: %v after it", f.budget.Kill().Sub(first))
	assert.Equal(t, 1, strings.Count(logs.String(), "a second deletion shortened the pod's grace"), logs.String())
	assert.Equal(t, 2, rep.Preserve.Counts[pause.Preserved])
}

// Fault (a review): a SIGTERM again, the kubelet's after a second
// `kubectl delete --grace-period` shortened the grace during the shutdown,
// forced the drain. The kubelet that began the termination keeps its
// grace and sends nothing then; a restarted one stops the container again
// (a runtime that sends the stop signal with every stop request delivers
// SIGTERM again) and kills the shorter grace after its restart. The drain
// now forces nothing and reads the pod's deletion again: the shorter grace
// moves SIGKILL, and every deadline, earlier.
//
//	0 s   SIGTERM (a deletion with the hour): the step runs, SIGKILL an hour away
//	      kubectl delete --grace-period=30: deletionTimestamp now + ~30 s
//	      SIGTERM again: not forced; the deletion read again, SIGKILL ~30 s away
func TestSIGTERMAgainReadsTheShorterDeletion(t *testing.T) {
	api := newPodAPI(t)
	pod, err := kube.New("sandboxd-0", api.cfg)
	require.NoError(t, err)
	var logs logbuf.Buffer
	stepStarted, release := make(chan struct{}), make(chan struct{})
	f := newFixture(t, fixtureOpts{grace: time.Hour, margin: time.Second, sandboxes: 2, latency: time.Millisecond,
		steps: []Step{step("ublk", time.Second, func(ctx context.Context) error {
			close(stepStarted)
			select {
			case <-release:
				return nil
			case <-ctx.Done(): // force, or its deadline
				return context.Cause(ctx)
			}
		})},
		edit: func(c *Config) { c.Pod, c.Logger = pod, slog.New(slog.NewTextHandler(&logs, nil)) }})
	first := time.Now().Add(time.Hour).Truncate(time.Second)
	api.SetDeletion(first)
	waitKill := func(kill time.Time) bool {
		timeout := time.After(30 * time.Second) // only a failure waits this long
		for {
			next := f.budget.Changed() // before the check: a change in between is not missed
			if f.budget.Kill().Equal(kill) {
				return true
			}
			select {
			case <-next:
			case <-timeout:
				return false
			}
		}
	}

	sigs := make(chan os.Signal, 2)
	done := make(chan *Report, 1)
	go func() { done <- f.d.ServeSignals(t.Context(), sigs) }()
	sigs <- syscall.SIGTERM
	<-stepStarted
	require.True(t, waitKill(first), "SIGTERM's read of the hour's deletion")

	second := time.Now().Add(30 * time.Second).Truncate(time.Second)
	api.SetDeletion(second)
	sigs <- syscall.SIGTERM
	read := waitKill(second)
	close(release)
	rep := <-done

	assert.True(t, read, "the SIGTERM again read the shorter deletion: SIGKILL %v after it", f.budget.Kill().Sub(second))
	assert.False(t, rep.Forced, "a SIGTERM again forced the drain")
	assert.Equal(t, OK, rep.Phase("ublk").Result, rep.Phase("ublk").Error)
	assert.True(t, rep.Budget.Kill.Equal(second), "SIGKILL %v after the second deletion's", rep.Budget.Kill.Sub(second))
	assert.Contains(t, logs.String(), `level=INFO msg="drain: SIGTERM during the shutdown: not forcing: `)
	assert.Contains(t, logs.String(), `at="SIGTERM during the shutdown"`)
}

// Fault (docs/faults.md row 235): `kubectl delete --grace-period=3` on a
// pod without a preStop hook whose manifest says 60 s. SIGTERM's read of
// the pod answers a few milliseconds after the preserve phase laid out its
// window by the manifest's grace; the Preserver kept starting preserves by
// that window, and the kubelet's SIGKILL, 3 s after SIGTERM, took them and
// the device teardown after them (measured under the real kubelet with the
// real API server: sandboxd SIGKILLed, no Report). The preserve phase now
// follows the budget: no preserve starts after the deadline it moves to.
//
//	0 s      SIGTERM: the preserve phase plans for 60 s; 8 preserves of 1 s, one at a time
//	0.1 s    the read: SIGKILL at 3 s
//	~1.4 s   no preserve starts any more; the running one ends; the step; exit before 3 s
func TestPreserveFollowsAReadLandingAfterItsWindow(t *testing.T) {
	for _, inFlight := range []bool{false, true} {
		t.Run(fmt.Sprintf("a create in flight %v", inFlight), func(t *testing.T) { preserveFollowsALateRead(t, inFlight, time.Second) })
	}
	// A preserve of 5 s already running when the read lands is cut by the
	// new hard deadline (pause.Preserver.Tighten), not left to run past
	// SIGKILL with the device step behind it.
	t.Run("a preserve longer than the time left", func(t *testing.T) { preserveFollowsALateRead(t, false, 5*time.Second) })
}

// preserveFollowsALateRead is TestPreserveFollowsAReadLandingAfterItsWindow;
// with inFlight, a create admitted before the gate closed never ends, and
// the gate's wait for it, laid out by the manifest's 60 s, follows the
// budget too.
func preserveFollowsALateRead(t *testing.T, inFlight bool, pauseTakes time.Duration) {
	synctest.Test(t, func(t *testing.T) {
		pod := deletedPodReadLate(t, 3*time.Second, 100*time.Millisecond)
		var ran []string
		f := newFixture(t, fixtureOpts{grace: 60 * time.Second, sandboxes: 8, latency: pauseTakes, limit: 1,
			steps: []Step{recordStep("ublk", 500*time.Millisecond, &ran)},
			edit:  func(c *Config) { c.Pod = pod }})
		if inFlight {
			leave, err := f.d.Gate().Enter(Create)
			require.NoError(t, err)
			defer leave()
		}
		rep := f.d.Shutdown(context.Background())

		kill := rep.Budget.SIGTERM.Add(3 * time.Second).Truncate(time.Second)
		require.True(t, rep.Budget.Kill.Equal(kill), "the deletion's SIGKILL %v, not %v", kill, rep.Budget.Kill)
		assert.Positive(t, rep.Headroom, "exit before SIGKILL")
		if pauseTakes > 3*time.Second {
			assert.Equal(t, 1, rep.Preserve.Counts[pause.TimedOut], "the preserve running, cut: %v", rep.Preserve.Counts)
		} else {
			assert.Positive(t, rep.Preserve.Counts[pause.Preserved])
		}
		assert.Positive(t, rep.Preserve.Counts[pause.NotStarted], "the rest not started: reported")
		assert.Equal(t, []string{"ublk"}, ran)
		assert.False(t, rep.Phase(PhasePreserve).Deadline.After(rep.Budget.Deadline), "the phase's deadline as it moved")
		if inFlight {
			assert.Equal(t, TimedOut, rep.Phase(PhaseGate).Result)
			assert.Less(t, rep.Phase(PhaseGate).End.Sub(rep.Budget.SIGTERM), 3*time.Second, "the gate's wait ended by the read's SIGKILL")
		}
	})
}

// Fault: the preserve phase's second Run, for the sandboxes the creates
// in flight at the gate started (preserveAfterInFlight), was given the
// deadlines of the phase's window as laid out at its start, though the
// budget had moved SIGKILL earlier during the first Run (a read of the
// pod's deletion) and the phase's new deadlines were told to that Run
// alone (its context cancelled, pause.Preserver.Tighten): the preserve the
// second Run started ran past the new SIGKILL, and the critical step after
// it began after SIGKILL. The phase now gives every Run its deadlines as
// they stand when it is called. docs/faults.md row 622.
//
//	0 s    SIGTERM (no preStop hook, grace 60 s, margin 1 s); a create
//	       admitted before it boots its VM; the gate waits for it 1 s
//	1 s    the preserve phase lays out its window by 60 s; sb-0 (2 s) starts
//	2 s    the budget moves SIGKILL to 10 s: the Run is told the phase's
//	       new hard deadline, the ublk step's start, 8.5 s
//	3 s    sb-0 preserved; the Run ends; the phase waits for the create
//	4 s    the VM runs booted (30 s): the second Run starts its preserve
//	8.5 s  booted's preserve is cut; the ublk step (was: booted preserved
//	       at 34 s, the ublk step after it, 24 s past SIGKILL)
func TestSecondPreserveRunKeepsTheHardDeadlineTheBudgetMoved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ran []string
		f := newFixture(t, fixtureOpts{grace: 60 * time.Second, margin: time.Second, sandboxes: 1, latency: 2 * time.Second, limit: 1,
			steps: []Step{stepOf("ublk", 500*time.Millisecond, true, func(context.Context) error { ran = append(ran, "ublk"); return nil })},
			edit:  func(c *Config) { c.InFlightWait = time.Second }})
		leave, err := f.d.Gate().Enter(Create)
		require.NoError(t, err)
		go func() {
			time.Sleep(2 * time.Second) // the read of the pod's deletion, from its own goroutine
			f.budget.Tighten(f.budget.State().SIGTERM.Add(10 * time.Second))
			time.Sleep(2 * time.Second) // the VM boots
			f.node.Add(&draintest.Sandbox{Name: "booted", Latency: 30 * time.Second})
			leave()
		}()
		rep := f.d.Shutdown(context.Background())
		sigterm := rep.Budget.SIGTERM

		require.True(t, rep.Budget.Kill.Equal(sigterm.Add(10*time.Second)), "SIGKILL %v after SIGTERM", rep.Budget.Kill.Sub(sigterm))
		require.NotNil(t, rep.Preserve)
		assert.Equal(t, 8500*time.Millisecond, rep.Phase(PhasePreserve).Deadline.Sub(sigterm), "the phase's deadline as it moved")
		var booted *pause.Entry
		for i := range rep.Preserve.Entries {
			if rep.Preserve.Entries[i].ID == "booted" {
				booted = &rep.Preserve.Entries[i]
			}
		}
		require.NotNil(t, booted, "the second Run preserved the create's sandbox: %v", rep.Preserve.Entries)
		ublk := assertCutForTheUblkStep(t, rep, *booted, ran)
		assert.Equal(t, OK, ublk.Result, ublk.Error)
	})
}

// Fault (docs/faults.md row 239): the kubelet restarted during the
// preserve phase. The new kubelet runs the hook again and gives the pod's
// whole grace from that call (measured under the real kubelet:
// internal/realkubelet's TestRealKubeletWithAPIServer/restart), and the
// budget follows it, but the preserve phase kept the window it began
// with: it stopped starting preserves at the first SIGKILL's deadline and
// reported the rest lost with seconds left (under the real kubelet: 32 of
// 40 preserved, 8 lost, exit 13.9 s before the kubelet's SIGKILL). The
// phase now preserves again, until the deadline the budget moved to.
//
//	0 s    the hook (grace 20 s): 50 preserves of 1 s, two at a time, do not fit
//	       SIGTERM at once: the preserve phase plans for SIGKILL at 20 s
//	10 s   the kubelet restarts: the hook again, SIGKILL at 30 s
//	       the phase goes on past its first deadline; every sandbox preserved
func TestKubeletRestartDuringThePreservePhaseGivesItTheNewTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv", UID: "uid-0"}
		api.Delete(t0, 20*time.Second)
		pod := podOver(t, api, handlerTransport{api})
		var ran []string
		f := newFixture(t, fixtureOpts{grace: 20 * time.Second, sandboxes: 50, latency: time.Second, limit: 2,
			steps: []Step{recordStep("ublk", 500*time.Millisecond, &ran)},
			edit:  func(c *Config) { c.Pod = pod }})
		startQuery := func(at time.Time) string {
			return "?start=" + url.QueryEscape(at.Format(time.RFC3339Nano))
		}
		f.callPreStop(t.Context(), startQuery(t0)).wait(t) // the drain's deadline has passed: at once
		restarted := make(chan time.Time, 1)
		go func() {
			time.Sleep(10 * time.Second) // the kubelet's restart, 10 s into the termination
			at := time.Now()
			f.callPreStop(context.Background(), startQuery(at)+"&wait=0s").wait(t)
			restarted <- at
		}()
		rep := f.d.Shutdown(context.Background())
		at := <-restarted

		require.True(t, rep.Budget.Restart.Equal(at.Round(0)), "the budget followed the new run: %v", rep.Budget.Restart)
		assert.True(t, rep.Budget.Kill.Equal(at.Add(20*time.Second).Round(0)), "SIGKILL %v after the new run's", rep.Budget.Kill.Sub(at.Add(20*time.Second)))
		assert.Equal(t, 50, rep.Preserve.Counts[pause.Preserved], "%v", rep.Preserve.Counts)
		assert.True(t, rep.Phase(PhasePreserve).Deadline.After(t0.Add(20*time.Second)), "the phase's deadline as it moved later: %v", rep.Phase(PhasePreserve).Deadline.Sub(t0))
		assert.Positive(t, rep.Headroom, "exit before SIGKILL")
		assert.Equal(t, []string{"ublk"}, ran)
		require.NoError(t, rep.Err())
	})
}

// A preserve phase whose listing failed after the page that listed every
// sandbox it preserved lost none that it knows of, and cannot say there
// were no others: SandboxesLost says the listing was incomplete.
func TestIncompleteListingPostsSandboxesLost(t *testing.T) {
	api := newPodAPI(t)
	pod, err := kube.New("sandboxd-0", api.cfg)
	require.NoError(t, err)
	var node *draintest.Node
	paged := pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
		running, err := node.List(ctx)
		if err != nil {
			return nil, err
		}
		return running, errors.New("page 2: 503 Service Unavailable")
	})
	f := newFixture(t, fixtureOpts{grace: time.Hour, margin: time.Second, sandboxes: 3, latency: time.Millisecond,
		edit: func(c *Config) {
			c.Pod, c.Sandboxes = pod, paged
			c.Pause.Permanent = func(error) bool { return true } // no retry: a real-time test
		}})
	node = f.node
	rep := f.d.Shutdown(t.Context())
	require.NotNil(t, rep.Preserve)
	assert.Equal(t, 3, rep.Preserve.Counts[pause.Preserved])
	assert.Zero(t, rep.Lost())
	assert.True(t, rep.Preserve.Incomplete)
	var notes []string
	for _, ev := range api.Events() {
		if ev.Reason == "SandboxesLost" {
			assert.Equal(t, kube.Warning, ev.Type)
			notes = append(notes, ev.Note)
		}
	}
	require.Len(t, notes, 1)
	assert.Equal(t, "no listing was complete, the node may have sandboxes not listed: page 2: 503 Service Unavailable", notes[0])
}

// Shutdown's doc said it returns by the budget's deadline unless steps are
// abandoned; with Config.Pod it then waits for the events still queued, at
// most 1 s and half the time left before SIGKILL, which the margin holds:
//
//	SIGTERM ... the step runs to its deadline, the budget's: +55 s
//	+55 s ..... the Report is made; DrainFinished is queued behind the
//	            events an API server that hangs has not taken
//	+56 s ..... Shutdown returns: 1 s past the budget's deadline, 4 s
//	            before SIGKILL
func TestShutdownWithAPodWaitsForItsEventsPastTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv", UID: "uid-0"}
		api.Hang()
		token := filepath.Join(t.TempDir(), "token")
		require.NoError(t, os.WriteFile(token, []byte("t"), 0o600))
		pod, err := kube.New(api.Name, kube.Config{Host: "https://api.test", Namespace: api.Namespace, UID: api.UID, TokenFile: token,
			EventTimeout: time.Hour, Client: &http.Client{Transport: handlerTransport{api}}})
		require.NoError(t, err)
		f := newFixture(t, fixtureOpts{grace: 60 * time.Second, margin: 5 * time.Second,
			steps: []Step{step("http", time.Second, func(ctx context.Context) error { <-ctx.Done(); return nil })},
			edit:  func(c *Config) { c.Pod = pod }})
		rep := f.d.Shutdown(context.Background())
		returned := time.Now()
		require.NotNil(t, rep.Events)
		assert.Positive(t, rep.Events.Dropped)
		assert.True(t, rep.End.Equal(rep.Budget.Deadline), "the Report is made at the budget's deadline: %v", rep.End.Sub(rep.Budget.Deadline))
		assert.Equal(t, time.Second, returned.Sub(rep.Budget.Deadline), "Shutdown returns after the events' wait")
		assert.Equal(t, 4*time.Second, rep.Budget.Kill.Sub(returned))
	})
}

// assertCutForTheUblkStep asserts what a budget that moved SIGKILL to 10 s
// after SIGTERM leaves a 30 s preserve and a critical ublk step of 500 ms
// (margin 1 s): e cut (TimedOut) at the step's planned start, 8.5 s after
// SIGTERM, and the step run from there, before SIGKILL. It returns the
// step's phase.
func assertCutForTheUblkStep(t *testing.T, rep *Report, e pause.Entry, ran []string) *PhaseReport {
	t.Helper()
	sigterm := rep.Budget.SIGTERM
	assert.Equal(t, pause.TimedOut, e.Outcome)
	assert.Equal(t, 8500*time.Millisecond, e.End.Sub(sigterm), "%s cut at the ublk step's planned start", e.ID)
	ublk := rep.Phase("ublk")
	require.NotNil(t, ublk)
	assert.Equal(t, 8500*time.Millisecond, ublk.Start.Sub(sigterm), "the ublk step starts as planned, before SIGKILL")
	assert.Equal(t, []string{"ublk"}, ran)
	return ublk
}
