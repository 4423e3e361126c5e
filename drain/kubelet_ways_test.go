package drain

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/fakeapiserver"
	"github.com/drainkit/drainkit/internal/kubeletsim"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/kube"
	"github.com/drainkit/drainkit/pause"
)

// The server's budget says 30 s; the kubelet uses 4 s (a node-shutdown
// slice, an eviction's grace, or a second delete: no deletionTimestamp to
// read in the first two). The kubelet gives up on the preStop call at
// T0+4 s and SIGKILLs at T0+6 s. SIGTERM arriving while that call is still
// open tells the Drainer so: its budget expects SIGKILL exactly when the
// simulator sends it, and the shutdown fits in the 2 s.
//
//	0 ........ preStop GET /drain (the server waits for its 30 s plan)
//	4 s ...... kubelet stops waiting: SIGTERM while the call is open
//	4-5 s .... 4 pauses of 100 ms, the daemon step, exit
//	6 s ...... SIGKILL due: not needed
func TestSIGTERMDuringAnOpenHookMeansTheKubeletsGraceRanOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stopped := false
		f := newFixture(t, fixtureOpts{grace: 30 * time.Second, margin: 3 * time.Second, sandboxes: 4,
			latency: 100 * time.Millisecond, limit: 4,
			steps: []Step{stepOf("daemon", 200*time.Millisecond, true, func(ctx context.Context) error { stopped = true; return nil })}})
		tl, rep := f.terminate(t, kubeletsim.HandlerHook{Handler: f.d.PreStop(), Path: "/drain"}, 4*time.Second)
		t.Logf("timeline:\n%s", tl)
		assert.True(t, tl.HookKept, "the kubelet gave up on the hook")
		assert.False(t, tl.Killed, "exited before SIGKILL")
		assert.Equal(t, tl.KillDue, rep.Budget.Kill, "the budget knows the kubelet's SIGKILL")
		assert.Equal(t, 4, rep.Preserve.Counts["preserved"])
		assert.True(t, stopped, "the daemon step ran")
		assert.Positive(t, rep.Headroom)
	})
}

// The hook returned in time: SIGTERM finds no open call, and the budget
// keeps the kubelet's arithmetic (grace - whole seconds of the hook).
func TestSIGTERMAfterTheHookReturnedKeepsTheArithmetic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, fixtureOpts{grace: 10 * time.Second, margin: 2 * time.Second, sandboxes: 2,
			latency: 100 * time.Millisecond, limit: 2})
		tl, rep := f.terminate(t, kubeletsim.HandlerHook{Handler: f.d.PreStop(), Path: "/drain"}, 10*time.Second)
		assert.False(t, tl.HookKept)
		assert.Equal(t, tl.KillDue, rep.Budget.Kill)
		assert.Greater(t, rep.Budget.Kill.Sub(rep.Budget.SIGTERM), 2*time.Second, "more than the floor was left")
	})
}

// A sleep hook the server never sees: with deadline.Config.PreStopSleep the
// budget expects SIGKILL where the kubelet sends it.
func TestSleepHookDeclaredToTheBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, fixtureOpts{grace: 10 * time.Second, margin: 2 * time.Second, sandboxes: 2,
			latency: 100 * time.Millisecond, limit: 2, budget: deadline.Config{PreStopSleep: 4 * time.Second}})
		tl, rep := f.terminate(t, kubeletsim.Sleep(4*time.Second), 10*time.Second)
		assert.Equal(t, tl.KillDue, rep.Budget.Kill, "SIGTERM + 10 s - 4 s")
		assert.Equal(t, tl.Start, rep.Budget.Start, "T0 is the sleep's start")
	})
}

// The kubelet terminates the pod on its own (graceful node shutdown gives
// the pod a 4 s slice; the manifest says 30 s): the pod has no
// deletionTimestamp. Declared as Config.KubeletGrace, that grace is what
// the budget plans for from the preStop call on, so the wait ends in time
// to preserve 16 sandboxes of 500 ms and stop the daemon before SIGKILL.
// Without it, the wait plans for 30 s, the kubelet abandons the hook at
// 4 s, and the rest must fit in the 2 s after SIGTERM: sandboxes are lost.
//
//	KubeletGrace 4 s                         not declared
//	0 ...... preStop, the pod read:          0 ...... preStop, the pod read:
//	         no deletion, SIGKILL at 4 s              no deletion, the 30 s stand
//	~0.5 s . the wait ends: SIGTERM          4 s .... the kubelet gives up: SIGTERM
//	~2.5 s . 16 preserved, the daemon step   6 s .... SIGKILL: 2 s for 16 × 500 ms
//	4.x s .. SIGKILL due: not needed
func TestKubeletsOwnTerminationPlansForTheKubeletGrace(t *testing.T) {
	run := func(t *testing.T, kubeletGrace time.Duration, noHook bool, answered int, spec ...int64) (*kubeletsim.Timeline, *Report, bool) {
		var tl *kubeletsim.Timeline
		var rep *Report
		stopped := false
		synctest.Test(t, func(t *testing.T) {
			pod := podWithoutDeletion(t, answered, spec...)
			f := newFixture(t, fixtureOpts{grace: 30 * time.Second, margin: time.Second, sandboxes: 16,
				latency: 500 * time.Millisecond, limit: 4,
				steps: []Step{stepOf("daemon", 300*time.Millisecond, true, func(ctx context.Context) error { stopped = true; return nil })},
				edit:  func(c *Config) { c.Pod, c.KubeletGrace = pod, kubeletGrace }})
			var hook kubeletsim.Hook = kubeletsim.HandlerHook{Handler: f.d.PreStop(), Path: "/drain"}
			if noHook {
				hook = nil
			}
			tl, rep = f.terminate(t, hook, 4*time.Second)
			t.Logf("timeline:\n%s\npreserved %d, lost %d", tl, rep.Preserve.Counts["preserved"], rep.Preserve.Lost())
		})
		return tl, rep, stopped
	}

	t.Run("declared", func(t *testing.T) {
		tl, rep, stopped := run(t, 4*time.Second, false, 0)
		assert.False(t, tl.HookKept, "the wait ended before the kubelet gave up on it")
		assert.False(t, tl.Killed, "exited before SIGKILL")
		assert.Equal(t, tl.Start.Add(4*time.Second), rep.Budget.Kill,
			"the end is T0 + the kubelet's grace (node shutdown lets the node go down then), not its SIGKILL %v", tl.KillDue.Sub(tl.Start))
		assert.Equal(t, 16, rep.Preserve.Counts["preserved"])
		assert.True(t, stopped, "the daemon step ran")
		assert.Positive(t, rep.Headroom)
	})
	t.Run("not declared", func(t *testing.T) {
		tl, rep, _ := run(t, 0, false, 0)
		assert.True(t, tl.HookKept, "the wait planned for the manifest's 30 s: the kubelet gave up on it")
		assert.Equal(t, tl.KillDue, rep.Budget.Kill, "SIGTERM during the open call: 2 s")
		assert.Positive(t, rep.Preserve.Lost(), "2 s after SIGTERM is not enough for 16 × 500 ms at 4")
	})
	// The grace the budget was given is not the pod's (DRAINKIT_GRACE, or
	// drain.New's Budget, left at 30 s where the spec says 4 s): a
	// termination the kubelet makes on its own gives at most the spec's,
	// which the read of the pod says, and the budget takes it then.
	t.Run("not declared, the spec's grace shorter than the budget's", func(t *testing.T) {
		tl, rep, stopped := run(t, 0, false, 0, 4)
		assert.False(t, tl.HookKept, "the wait ended before the kubelet gave up on it")
		assert.Equal(t, tl.Start.Add(4*time.Second), rep.Budget.Kill, "T0 + the spec's grace")
		assert.Equal(t, 16, rep.Preserve.Counts["preserved"])
		assert.True(t, stopped, "the daemon step ran")
	})
	t.Run("declared, the API server gone at SIGTERM", func(t *testing.T) {
		_, rep, _ := run(t, 4*time.Second, false, 1)
		assert.Equal(t, rep.Budget.Start.Add(4*time.Second), rep.Budget.Kill,
			"SIGTERM's arithmetic (4 s less the hook's whole seconds) does not outlast the node's end, read again or not")
		assert.Equal(t, 16, rep.Preserve.Counts["preserved"])
	})
	t.Run("declared, no hook", func(t *testing.T) { // the read at SIGTERM
		tl, rep, stopped := run(t, 4*time.Second, true, 0)
		assert.Equal(t, tl.KillDue, rep.Budget.Kill, "SIGTERM + 4 s, not + 30 s")
		assert.Equal(t, 16, rep.Preserve.Counts["preserved"])
		assert.True(t, stopped, "the daemon step ran")
	})
}

// podWithoutDeletion is the pod reader of a pod the kubelet terminates on
// its own: the API server has it with no deletionTimestamp (and the
// spec's grace, if given), and answers the first answered reads (all when
// zero), then 503. It is served in
// memory, so that it works under synctest.
func podWithoutDeletion(t *testing.T, answered int, spec ...int64) *kube.Pod {
	t.Helper()
	api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv", UID: "uid-0", ReadsAnswered: answered}
	for _, g := range spec { // spec.terminationGracePeriodSeconds; none given: absent
		api.SetGrace(g)
	}
	return podOver(t, api, handlerTransport{api})
}

// podOver is the pod reader of api, its requests made by rt (in memory,
// so that it works under synctest).
func podOver(t *testing.T, api *fakeapiserver.Pod, rt http.RoundTripper) *kube.Pod {
	t.Helper()
	return podAs(t, api, api.UID, rt)
}

// podAs is the pod reader of api's pod with kube.Config.UID uid, its
// requests made by rt: a uid other than api's is a POD_NAME that names
// another pod, or a POD_UID that is not the pod's.
func podAs(t *testing.T, api *fakeapiserver.Pod, uid string, rt http.RoundTripper) *kube.Pod {
	t.Helper()
	cfg := configOver(t, api, rt)
	cfg.UID = uid
	pod, err := kube.New(api.Name, cfg)
	require.NoError(t, err)
	return pod
}

// configOver is the kube.Config of api's pod whose requests rt makes, with
// no UID.
func configOver(t *testing.T, api *fakeapiserver.Pod, rt http.RoundTripper) kube.Config {
	t.Helper()
	token := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(token, []byte("t"), 0o600))
	return kube.Config{Host: "https://api.test", Namespace: api.Namespace, TokenFile: token, Client: &http.Client{Transport: rt}}
}

// deletedPodReadLate is the pod sandboxd-0, deleted now with grace, whose
// API server answers each read after wait: a read started at SIGTERM lands
// once the phases' windows are laid out by the manifest's grace.
func deletedPodReadLate(t *testing.T, grace, wait time.Duration) *kube.Pod {
	t.Helper()
	api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv", UID: "uid-0"}
	api.Delete(time.Now(), grace)
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(wait) // the API server's answer, after the windows
		api.ServeHTTP(w, r)
	})
	return podOver(t, api, handlerTransport{slow})
}

// The kubelet giving up on the hook is logged at Warn with what the server
// can tell of it: the grace the kubelet used (about the time from T0 to
// SIGTERM) against the budget's, and the likely causes. Before, only the
// budget's Info line "budget changed" said so, and the Report shows it
// only as SIGKILL 2 s after SIGTERM: with DRAINKIT_GRACE=30 in a pod whose
// terminationGracePeriodSeconds was 4, every drain ended with exit 0 and
// 2 s for the preserves, and nothing above Info said the two disagree.
func TestKubeletAbandoningTheHookIsAWarningNamingBothGraces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs logbuf.Buffer
		f := newFixture(t, fixtureOpts{grace: 30 * time.Second, margin: 3 * time.Second, sandboxes: 4,
			latency: 100 * time.Millisecond, limit: 4, edit: func(c *Config) {
				c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
			}})
		_, rep := f.terminate(t, kubeletsim.HandlerHook{Handler: f.d.PreStop(), Path: "/drain"}, 4*time.Second)
		require.NoError(t, rep.Err(), "2 s were enough here: the exit status is 0")
		assert.Regexp(t, `level=WARN msg="drain: SIGTERM came while the preStop hook was still open: the kubelet's grace period ran out before the budget's`+
			`.*" kubelet_grace=4s budget_grace=30s`, logs.String())
	})
}

// The kubelet never cancels an httpGet hook's request: it stops waiting at
// its grace's end. A call whose connection closes before the wait ended
// (the kubelet restarted, or closed the descriptor number of its inhibitor
// lock a second time, which by then was this connection's, as the real
// node shutdown showed) is no sign the hook returned in time: SIGTERM is
// taken as the hook abandoned, 2 s before SIGKILL, not the manifest's
// grace less the hook's whole seconds.
//
//	0 ...... preStop GET /drain (the wait plans for 30 s)
//	3 s .... the connection closes under the call
//	4 s .... SIGTERM: SIGKILL expected at 6 s, not at 30 s
func TestPreStopCallClosedByItsClientCountsAsAbandoned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rep := sigtermAfterAClosedCall(t, "")
		assert.Equal(t, rep.Budget.SIGTERM.Add(deadline.MinimumGracePeriod), rep.Budget.Kill, "SIGKILL %v after SIGTERM", rep.Budget.Kill.Sub(rep.Budget.SIGTERM))
		assert.Equal(t, 2, rep.Preserve.Counts["preserved"])
	})
}

// An exec hook's poll (?wait=) ends by its bound or its own request
// timeout all the time: a closed one says nothing of the kubelet.
func TestExecHookPollClosedByItsClientIsNoAbandonment(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rep := sigtermAfterAClosedCall(t, "?wait=10s")
		assert.Equal(t, rep.Budget.SIGTERM.Add(deadline.KubeletRemaining(30*time.Second, 4*time.Second)), rep.Budget.Kill,
			"the kubelet's arithmetic: 30 s less the hook's 4 s")
	})
}

// sigtermAfterAClosedCall is the two tests' timeline, grace 30 s: a
// preStop call with query at 0, its connection closed at 3 s, SIGTERM at
// 4 s; it returns the shutdown's Report.
func sigtermAfterAClosedCall(t *testing.T, query string) *Report {
	f := newFixture(t, fixtureOpts{grace: 30 * time.Second, margin: time.Second, sandboxes: 2, latency: 100 * time.Millisecond, limit: 2})
	ctx, closeConn := context.WithCancel(t.Context())
	call := f.callPreStop(ctx, query)
	time.Sleep(3 * time.Second)
	closeConn()
	<-call.done
	time.Sleep(time.Second)
	return f.d.Shutdown(t.Context())
}

// The kubelet sends SIGTERM some time after the preStop hook answered
// (20-70 ms measured, up to 260 ms on a loaded node), and the preserve
// phase starts at SIGTERM. Where SIGKILL is fixed, here by the kubelet's
// own grace (T0 + 4 s), that time would come out of the preserve phase's
// reserve: the wait ends sigtermLag before the drain deadline, so that a
// SIGTERM 250 ms after the answer still leaves both rounds of 4 × 300 ms
// their time. The real node shutdown lost the second round at load 10-13.
//
//	0 ........ preStop: no deletionTimestamp, SIGKILL fixed at T0+4 s
//	~1.3 s ... the wait ends, 0.3 s before the drain deadline
//	+250 ms .. SIGTERM: 8 preserves of 300 ms at 4 at once, the daemon step
func TestSIGTERMLagAfterTheHooksAnswerDoesNotCostTheLastRound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pod := podWithoutDeletion(t, 0)
		f := newFixture(t, fixtureOpts{grace: 15 * time.Second, margin: time.Second, sandboxes: 8, latency: 300 * time.Millisecond, limit: 4,
			steps: []Step{stepOf("daemon", 500*time.Millisecond, true, func(ctx context.Context) error { return nil })},
			edit:  func(c *Config) { c.Pod, c.KubeletGrace = pod, 4*time.Second }})
		sum := f.callPreStop(t.Context(), "").wait(t)
		require.Equal(t, reasonDeadline, sum.Reason)
		time.Sleep(250 * time.Millisecond) // the kubelet's SIGTERM lag on a loaded node
		rep := f.d.Shutdown(t.Context())
		t.Logf("wait ended at T0+%v, drain deadline T0+%v, SIGTERM T0+%v, SIGKILL T0+%v; preserved %d, lost %d",
			sum.End.Sub(sum.Start), sum.DrainDeadline.Sub(sum.Start), rep.Budget.SIGTERM.Sub(rep.Budget.Start), rep.Budget.Kill.Sub(rep.Budget.Start),
			rep.Preserve.Counts["preserved"], rep.Preserve.Lost())
		assert.Equal(t, 8, rep.Preserve.Counts["preserved"], "both rounds")
		assert.Positive(t, rep.Headroom)
	})
}

// The preserve phase lists the running sandboxes before its first
// preserve, and a listing takes time (an HTTP listing: the supervisor's
// over AgentENV's API). The plan's preserve reserve is the rounds of
// preserves, and the preStop wait ended the kubelet's lag before the drain
// deadline, no more, so where SIGKILL is fixed (here the kubelet's own
// 4 s) the listing came out of the last round: row 121's timeline with
// every listing taking 100 ms preserved 4 of 8. The wait now ends a count's
// time earlier too.
//
//	0 ........ preStop: no deletionTimestamp, SIGKILL fixed at T0+4 s
//	~1.5 s ... the wait ends: 0.3 s lag + a 100 ms listing + 2 rounds + the daemon step before T0+3 s
//	+250 ms .. SIGTERM: the listing, 8 preserves of 300 ms at 4, the daemon step
func TestPreStopWaitLeavesThePreservePhaseItsListing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pod := podWithoutDeletion(t, 0)
		f := newFixture(t, fixtureOpts{grace: 15 * time.Second, margin: time.Second, sandboxes: 8, latency: 300 * time.Millisecond, limit: 4,
			steps: []Step{stepOf("daemon", 500*time.Millisecond, true, func(ctx context.Context) error { return nil })},
			edit: func(c *Config) {
				c.Pod, c.KubeletGrace = pod, 4*time.Second
				c.Sandboxes = slowLister(c.Sandboxes, 100*time.Millisecond)
			}})
		sum := f.callPreStop(t.Context(), "").wait(t)
		require.Equal(t, reasonDeadline, sum.Reason)
		time.Sleep(250 * time.Millisecond) // the kubelet's SIGTERM lag on a loaded node
		rep := f.d.Shutdown(t.Context())
		t.Logf("wait ended at T0+%v, drain deadline T0+%v, SIGTERM T0+%v, SIGKILL T0+%v; preserved %d, lost %d",
			sum.End.Sub(sum.Start), sum.DrainDeadline.Sub(sum.Start), rep.Budget.SIGTERM.Sub(rep.Budget.Start), rep.Budget.Kill.Sub(rep.Budget.Start),
			rep.Preserve.Counts[pause.Preserved], rep.Preserve.Lost())
		assert.False(t, sum.End.After(sum.DrainDeadline.Add(-sigtermLag-100*time.Millisecond)), "the lag and the listing left")
		assert.Equal(t, 8, rep.Preserve.Counts[pause.Preserved], "both rounds")
		assert.Positive(t, rep.Headroom)
		require.NoError(t, rep.Err())
	})
}

// An exec preStop hook built on ExecHook without Start ("zero means the
// server's time of the first request") polls the handler with ?wait= and no
// ?start=. The handler takes every such call for an httpGet hook's, each a
// run of its own: with Config.Pod, every poll is read as the kubelet
// restarting, and Budget.OnRestart moves SIGKILL to the poll's arrival plus
// the deletion's grace. The real kubelet ran the exec hook once: it gives up
// on it at T0 + 60 s and SIGKILLs 2 s later.
//
//	0 s      kubectl delete (60 s): the exec hook starts, its first poll: T0
//	~9 s     its second poll: read as a new run, SIGKILL planned at ~69 s
//	...      every poll moves it 9 s later, and the drain deadline with it
//	60 s     the kubelet gives up on the hook: SIGTERM; SIGKILL at 62 s
//
// With the wait planned for T0 + 60 s - the reserves, 8 sandboxes of 2 s at
// 2 (8 s) are preserved before SIGTERM comes; planned for a SIGKILL that
// keeps moving, the wait runs into the kubelet's end and they are lost.
func TestExecHookWithoutStartIsOneRunNotARestartPerPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv", UID: "uid-0"}
		api.Delete(time.Now(), 60*time.Second)
		pod := podOver(t, api, handlerTransport{api})
		f := newFixture(t, fixtureOpts{grace: 60 * time.Second, margin: 2 * time.Second, sandboxes: 8,
			latency: 2 * time.Second, limit: 2, edit: func(c *Config) { c.Pod = pod }})
		hook := kubeletsim.HookFunc(func(ctx context.Context) error {
			_, err := ExecHook{URL: "http://server.test/drain", Client: &http.Client{Transport: handlerTransport{f.d.PreStop()}}}.Run(ctx)
			return err
		})
		tl, rep := f.terminate(t, hook, 60*time.Second)
		t.Logf("timeline:\n%s", tl)
		assert.False(t, rep.Budget.Restart.After(rep.Budget.Start), "no kubelet restart: one exec hook, polling; the budget's run at T0+%v",
			rep.Budget.Restart.Sub(rep.Budget.Start))
		assert.False(t, tl.HookKept, "the wait ended before the kubelet gave up on the hook")
		assert.False(t, rep.Budget.Kill.After(tl.KillDue), "the Report's SIGKILL is not after the kubelet's: %v after",
			rep.Budget.Kill.Sub(tl.KillDue))
		assert.Equal(t, 8, rep.Preserve.Counts["preserved"])
		assert.False(t, tl.Killed, "exited before SIGKILL")
	})
}

// Row 388 again, for an exec hook that is not ExecHook: a shell loop around
// curl polling the handler with ?wait= (the AgentENV proposal's bounded
// loop, pointed at drainkit's hook) sends no ?start=, and the handler took
// each poll for an httpGet call, a run of its own: with Config.Pod every
// poll was read as the kubelet restarting (Budget.OnRestart), SIGKILL moved
// a poll later each time, the wait ran into the kubelet's end of the hook
// at T0 + 60 s, and the preserve phase had the 2 s floor. The kubelet's
// httpGet never sends ?wait=: a call with it and without ?start= is a
// poll of the run under way, never a new one.
//
//	0 s      kubectl delete (60 s): the loop's first poll: T0
//	~9 s     its second poll: read as a new run, SIGKILL planned at ~69 s
//	...      every poll moves it 9 s later, and the drain deadline with it
//	60 s     the kubelet gives up on the hook: SIGTERM; SIGKILL at 62 s
func TestPollsWithoutStartAreOneRunNotARestartEach(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv", UID: "uid-0"}
		api.Delete(time.Now(), 60*time.Second)
		pod := podOver(t, api, handlerTransport{api})
		f := newFixture(t, fixtureOpts{grace: 60 * time.Second, margin: 2 * time.Second, sandboxes: 8,
			latency: 2 * time.Second, limit: 2, edit: func(c *Config) { c.Pod = pod }})
		client := &http.Client{Transport: handlerTransport{f.d.PreStop()}}
		polls := 0
		hook := kubeletsim.HookFunc(func(ctx context.Context) error { // curl --max-time 10 '...?wait=9s' in a loop
			for ctx.Err() == nil {
				polls++
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				req, err := http.NewRequestWithContext(rctx, http.MethodGet, "http://server.test/drain?wait=9s", nil)
				require.NoError(t, err)
				var sum PreStopSummary
				resp, err := client.Do(req)
				if err == nil {
					err = json.NewDecoder(resp.Body).Decode(&sum)
					_ = resp.Body.Close()
				}
				cancel()
				if err == nil && sum.Done {
					return nil
				}
			}
			return ctx.Err()
		})
		tl, rep := f.terminate(t, hook, 60*time.Second)
		t.Logf("%d polls; timeline:\n%s", polls, tl)
		require.Greater(t, polls, 1, "the loop polled more than once")
		assert.False(t, rep.Budget.Restart.After(rep.Budget.Start), "no kubelet restart: one exec hook, polling; the budget's run at T0+%v",
			rep.Budget.Restart.Sub(rep.Budget.Start))
		assert.False(t, tl.HookKept, "the wait ended before the kubelet gave up on the hook")
		assert.False(t, rep.Budget.Kill.After(tl.KillDue), "the Report's SIGKILL is not after the kubelet's: %v after",
			rep.Budget.Kill.Sub(tl.KillDue))
		assert.Equal(t, 8, rep.Preserve.Counts["preserved"])
		assert.False(t, tl.Killed, "exited before SIGKILL")
	})
}

// The server's own reason to drain during the preStop wait is not the
// kubelet giving up on the hook: drain.Server.Run and sandboxd end
// ServeSignals's ctx when their serving stops, and a server may end it for
// a reason of its own; no SIGTERM came. The drain starts, its
// wait ends and the hook answers, and the kubelet then sends SIGTERM with
// the grace the hook left. The open call was taken for an abandoned hook,
// the budget cut to 2 s after the ctx ended: of 8 preserves of 1 s, one
// at a time, 1 fit.
//
//	0 ....... preStop GET /drain: the wait, planned for a 60 s grace
//	10 s .... the server stops serving: ctx ends, the drain starts, the hook answers
//	10 s .... the kubelet's SIGTERM (the hook took 10 s: 50 s left)
//	10-18 s . 8 preserves of 1 s
//	60 s .... SIGKILL due: not needed
func TestServerStoppingDuringThePreStopWaitKeepsTheHooksGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs logbuf.Buffer
		f := newFixture(t, fixtureOpts{grace: 60 * time.Second, margin: 5 * time.Second, sandboxes: 8,
			latency: time.Second, limit: 1,
			edit: func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) }})
		proc := kubeletsim.NewInProcess()
		ctx, stopped := context.WithCancelCause(context.Background())
		time.AfterFunc(10*time.Second, func() { stopped(errStoppedServing) })
		var rep *Report
		go func() {
			defer proc.Exit()
			rep = f.d.ServeSignals(ctx, proc.Signals())
		}()
		tl, err := kubeletsim.Terminate(context.Background(), proc, kubeletsim.HandlerHook{Handler: f.d.PreStop(), Path: "/drain"}, 60*time.Second)
		require.NoError(t, err)
		synctest.Wait()
		t.Logf("timeline:\n%s", tl)
		require.NotNil(t, rep)
		assert.Equal(t, errStoppedServing.Error(), rep.Cause)
		assert.False(t, tl.HookKept, "the hook answered when the drain started")
		assert.Equal(t, tl.KillDue, rep.Budget.Kill, "the budget expects the kubelet's SIGKILL, not one 2 s after the ctx ended")
		assert.Equal(t, 8, rep.Preserve.Counts[pause.Preserved])
		assert.False(t, tl.Killed, "exited before SIGKILL")
		assert.NotContains(t, logs.String(), "the kubelet's grace period ran out")
		require.NoError(t, rep.Err())
	})
}

// The kubelet giving up on the hook is still seen when its SIGTERM also
// ends ServeSignals's ctx (a ctx from signal.NotifyContext): select takes
// the ctx or the signal, and either way the SIGTERM began the shutdown.
func TestSIGTERMThatAlsoEndsTheCtxIsStillTheKubeletGivingUp(t *testing.T) {
	for range 20 { // select picks at random: both ways, every time
		synctest.Test(t, func(t *testing.T) {
			f := newFixture(t, fixtureOpts{grace: 60 * time.Second, margin: 5 * time.Second, sandboxes: 2,
				latency: 100 * time.Millisecond, limit: 2})
			call := f.callPreStop(t.Context(), "")
			time.Sleep(10 * time.Second)
			ctx, cancel := context.WithCancel(context.Background())
			sigs := make(chan os.Signal, 1)
			sigs <- syscall.SIGTERM
			cancel()
			rep := f.d.ServeSignals(ctx, sigs)
			call.wait(t)
			assert.Equal(t, "SIGTERM", rep.Cause)
			assert.Equal(t, deadline.MinimumGracePeriod, rep.Budget.Kill.Sub(rep.Budget.SIGTERM), "the call was still open: the kubelet gave up on it")
		})
	}
}

// notifyCause is the cause signal.NotifyContext gives the context it ends
// on a signal (os/signal's: "terminated signal received", which is
// context.Canceled too).
type notifyCause string

func (c notifyCause) Error() string        { return string(c) }
func (c notifyCause) Is(target error) bool { return target == context.Canceled }

// The SIGTERM that ends ServeSignals' ctx (a ctx from signal.NotifyContext)
// may reach ServeSignals' channel a moment after the ctx ended: os/signal
// sends a signal to its channels one after the other, in no set order,
// and NotifyContext's goroutine may cancel the ctx before the send to the
// server's channel.
//
//	0 ......... preStop: the call stays open (the kubelet's grace, 60 s)
//	10 s ...... SIGTERM: the kubelet gave up on the hook; the ctx ends
//	10 s + 1 ns the SIGTERM reaches the channel
//
// Before, ServeSignals took the ctx's end, found no signal waiting, and
// took it for the server's own reason to drain: not the kubelet giving up
// on the hook, so the budget kept SIGKILL at +60 s where the kubelet's
// came at +12 s, and the drain planned its preserves and steps past it.
// A ctx ended by a signal now waits a moment for that signal.
func TestSIGTERMThatEndsTheCtxFirstIsStillTheKubeletGivingUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, fixtureOpts{grace: 60 * time.Second, margin: 5 * time.Second, sandboxes: 2,
			latency: 100 * time.Millisecond, limit: 2})
		call := f.callPreStop(t.Context(), "")
		time.Sleep(10 * time.Second)
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(notifyCause(syscall.SIGTERM.String() + " signal received"))
		sigs := make(chan os.Signal, 1)
		go func() {
			time.Sleep(time.Nanosecond)
			sigs <- syscall.SIGTERM
		}()
		rep := f.d.ServeSignals(ctx, sigs)
		call.wait(t)
		assert.Equal(t, "SIGTERM", rep.Cause)
		assert.Equal(t, deadline.MinimumGracePeriod, rep.Budget.Kill.Sub(rep.Budget.SIGTERM), "the call was still open: the kubelet gave up on it")
	})
}

// signalCause knows the cause signal.NotifyContext gives, not only the
// test's copy of it, and none of a ctx's other ends.
func TestSignalCauseIsNotifyContexts(t *testing.T) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGUSR1)
	defer stop()
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGUSR1))
	<-ctx.Done()
	assert.True(t, signalCause(context.Cause(ctx)), "%q", context.Cause(ctx))
	assert.True(t, signalCause(notifyCause("terminated signal received")))
	assert.False(t, signalCause(context.Canceled))
	assert.False(t, signalCause(errors.New("the server stopped serving")))
	assert.False(t, signalCause(nil))
}

// Under graceful node shutdown the kubelet is done at the end of its slice
// and the node goes down then, whatever it leaves the container after
// SIGTERM (docs/real-kubelet.md, "Graceful node shutdown"). Work that fits
// in the kubelet's 2 s after SIGTERM (2 sandboxes of 100 ms, a 300 ms
// step) lets the plan run a preStop wait until the kubelet gives up on the
// hook: SIGKILL comes no sooner than 2 s after SIGTERM, whenever SIGTERM
// comes. The node's end does not move with SIGTERM, so under the kubelet's
// own termination (Config.KubeletGrace) the wait still ends in time for
// that work before T0 + KubeletGrace.
//
//	0 ...... preStop, the pod read: no deletion, the node's end at 4 s
//	2.3 s .. the wait ends (1 s margin, 400 ms of reserves, 300 ms for SIGTERM)
//	2.3 s .. SIGTERM: 2 preserved, the daemon step (300 ms), exit at 2.7 s
//	4 s .... the node goes down (the kubelet's SIGKILL would be later)
func TestKubeletsOwnTerminationEndsTheWaitBeforeTheNodesEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stopped := false
		f := newFixture(t, fixtureOpts{grace: 30 * time.Second, margin: time.Second, sandboxes: 2,
			latency: 100 * time.Millisecond, limit: 4,
			steps: []Step{stepOf("daemon", 300*time.Millisecond, true, func(ctx context.Context) error {
				time.Sleep(300 * time.Millisecond) // the daemon takes its reserve to stop
				stopped = true
				return nil
			})},
			edit: func(c *Config) { c.Pod, c.KubeletGrace = podWithoutDeletion(t, 0), 4*time.Second }})
		tl, rep := f.terminate(t, kubeletsim.HandlerHook{Handler: f.d.PreStop(), Path: "/drain"}, 4*time.Second)
		t.Logf("timeline:\n%s", tl)
		end := tl.Start.Add(4 * time.Second)
		assert.False(t, tl.HookKept, "the wait ended before the kubelet gave up on it")
		assert.True(t, tl.Exit.Before(end), "exited at T0 + %v, the node goes down at T0 + 4 s", tl.Exit.Sub(tl.Start))
		assert.Equal(t, 2, rep.Preserve.Counts["preserved"])
		assert.True(t, stopped, "the daemon step ran")
	})
}

// The node's end does not move with SIGTERM either: a SIGTERM in the
// slice's last 2 s leaves the kubelet's SIGKILL 2 s after it, past the
// node's end, and the budget's deadline must still fall before that end,
// or the critical device teardown is laid out after the node went down. A
// margin of 500 ms and 500 ms of reserves end the wait at 2.7 s.
//
//	0 ...... preStop, the pod read: no deletion, the node's end at 4 s
//	2.7 s .. the wait ends; SIGTERM: the kubelet's SIGKILL at 4.7 s
//	         the deadline: 4 s less half of the 1.3 s left, at most the margin
//	3.3 s .. the http step ends at its deadline; the ublk step (200 ms)
//	3.5 s .. the teardown is over, the process exits
//	4 s .... the node goes down
func TestKubeletsOwnTerminationEndsTheDeviceTeardownBeforeTheNodesEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var torndown time.Time
		f := newFixture(t, fixtureOpts{grace: 30 * time.Second, margin: 500 * time.Millisecond, sandboxes: 2,
			latency: 100 * time.Millisecond, limit: 4,
			steps: []Step{
				stepOf("http", 200*time.Millisecond, false, func(ctx context.Context) error {
					<-ctx.Done() // a listener that drains until its deadline
					return nil
				}),
				stepOf("ublk", 200*time.Millisecond, true, func(ctx context.Context) error {
					time.Sleep(200 * time.Millisecond) // the devices take the step's reserve to stop
					torndown = time.Now()
					return nil
				})},
			edit: func(c *Config) { c.Pod, c.KubeletGrace = podWithoutDeletion(t, 0), 4*time.Second }})
		tl, rep := f.terminate(t, kubeletsim.HandlerHook{Handler: f.d.PreStop(), Path: "/drain"}, 4*time.Second)
		t.Logf("timeline:\n%s", tl)
		end := tl.Start.Add(4 * time.Second)
		require.Equal(t, 2700*time.Millisecond, tl.SIGTERM.Sub(tl.Start), "SIGTERM in the slice's last 2 s")
		assert.Equal(t, tl.SIGTERM.Add(2*time.Second), rep.Budget.Kill, "the kubelet's SIGKILL, past the node's end")
		assert.Equal(t, end.Add(-500*time.Millisecond), rep.Budget.Deadline, "the node's end less the margin")
		assert.True(t, torndown.Before(end), "the devices stopped at T0 + %v, the node goes down at T0 + 4 s", torndown.Sub(tl.Start))
		assert.True(t, tl.Exit.Before(end), "exited at T0 + %v", tl.Exit.Sub(tl.Start))
		assert.Equal(t, 2, rep.Preserve.Counts["preserved"])
	})
}

// The DrainStarted Event says what the drain will do. Under the kubelet's
// own termination that is known once the preStop's read of the pod found
// no deletion: SIGKILL (the node's end) at T0 + KubeletGrace, and the wait
// ending by the rule to the budget's deadline, not run on to SIGKILL as
// the plan before that read lays it out.
//
//	0 ...... preStop, the pod read: no deletion, the node's end at 4 s
//	         DrainStarted: SIGKILL at T0+4s, drain until T0+2.6s
//	2.3 s .. the wait ends (2.6 s less the 300 ms for SIGTERM)
func TestDrainStartedSaysTheNodesEndUnderTheKubeletsOwnTermination(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv", UID: "uid-0"}
		f := newFixture(t, fixtureOpts{grace: 30 * time.Second, margin: time.Second, sandboxes: 2,
			latency: 100 * time.Millisecond, limit: 4,
			steps: []Step{stepOf("daemon", 300*time.Millisecond, true, func(ctx context.Context) error {
				time.Sleep(300 * time.Millisecond)
				return nil
			})},
			edit: func(c *Config) { c.Pod, c.KubeletGrace = podOver(t, api, handlerTransport{api}), 4*time.Second }})
		tl, _ := f.terminate(t, kubeletsim.HandlerHook{Handler: f.d.PreStop(), Path: "/drain"}, 4*time.Second)
		t.Logf("timeline:\n%s", tl)
		require.Equal(t, 2300*time.Millisecond, tl.SIGTERM.Sub(tl.Start), "the wait ended by the rule to the budget's deadline")
		var started string
		for _, ev := range api.Events() {
			if ev.Reason == eventDrainStarted {
				started = ev.Note
			}
		}
		t.Logf("DrainStarted: %s", started)
		assert.Contains(t, started, "SIGKILL expected at T0+4s", "the node's end")
		assert.Contains(t, started, "Plan: drain until T0+2.6s; gate until T0+2.6s; preserve until T0+2.7s (reserve 100ms); daemon until T0+3s")
	})
}
