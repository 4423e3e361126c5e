package drain

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeapiserver"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/pause"
)

// pollPod is the pod of these tests, deleted at t0 with a 20 s grace.
func pollPod(t0 time.Time) *fakeapiserver.Pod {
	api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv", UID: "uid-0"}
	api.Delete(t0, 20*time.Second)
	return api
}

// pollFixture is a Drainer with a 20 s grace over sandboxes pauses of 1 s,
// one at a time, reading api's pod through rt, its log kept in the buffer
// it returns; o adds steps and edit sets the rest of the Config.
func pollFixture(t *testing.T, api *fakeapiserver.Pod, rt http.RoundTripper, sandboxes int, o fixtureOpts) (*fixture, *logbuf.Buffer) {
	var logs logbuf.Buffer
	edit := o.edit
	f := newFixture(t, fixtureOpts{grace: 20 * time.Second, margin: time.Second, sandboxes: sandboxes, latency: time.Second, limit: 1,
		steps: o.steps,
		edit: func(c *Config) {
			c.Pod, c.Logger = podOver(t, api, rt), slog.New(slog.NewTextHandler(&logs, nil))
			if edit != nil {
				edit(c)
			}
		}})
	return f, &logs
}

// Fault (a review; the kubelet's part measured under the real kubelet,
// internal/realkubelet's TestRealKubeletWithAPIServer/restart): a drain
// with no preStop hook kept the first deletion's SIGKILL after a second,
// shorter deletion. The kubelet does keep it, until it restarts: the new
// kubelet stops the container again with the new grace and kills it that
// long after, and containerd sends no second SIGTERM, so nothing told the
// drain, which was still preserving when SIGKILL came. Without a hook the
// drain now reads the pod every second during the shutdown and, at a
// shorter grace, plans for the earliest restart: after the last read that
// found the first grace, plus the new grace.
//
//	0 s    deleted with 20 s; SIGTERM (no hook): 40 preserves of 1 s, one at a time
//	4.5 s  deleted again with 8 s: a kubelet restarted now kills at 12.5 s
//	5 s    the poll reads it: SIGKILL planned at 4 s (the last read of 20 s) + 8 s
//	       the drain ends before 12 s (before: planned for 20 s)
func TestShorterDeletionWithoutAHookPlansForARestartedKubelet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		api := pollPod(t0)
		var ran []string
		f, logs := pollFixture(t, api, handlerTransport{api}, 40, fixtureOpts{steps: []Step{recordStep("ublk", 500*time.Millisecond, &ran)}})
		go func() {
			time.Sleep(4500 * time.Millisecond)
			api.Delete(time.Now(), 8*time.Second)
		}()
		rep := f.d.Shutdown(context.Background())

		assert.Equal(t, t0.Add(12*time.Second), rep.Budget.Kill, "SIGKILL at T0+%v", rep.Budget.Kill.Sub(t0))
		assert.True(t, rep.End.Before(t0.Add(12*time.Second)), "the drain ended at T0+%v", rep.End.Sub(t0))
		assert.Positive(t, rep.Headroom)
		assert.Equal(t, []string{"ublk"}, ran, "the device step ran before the new SIGKILL")
		assert.Positive(t, rep.Preserve.Counts[pause.Preserved])
		assert.Positive(t, rep.Preserve.Counts[pause.NotStarted], "what no longer fits is reported: %v", rep.Preserve.Counts)
		assert.Equal(t, 1, strings.Count(logs.String(), "no preStop hook tells this drain"), logs.String())
		assert.Equal(t, 1, strings.Count(logs.String(), `msg="drain: the pod's deletion read"`), "a poll that finds nothing new is not logged at Info")
	})
}

// A drain whose preStop call came has the hook to show it a restarted
// kubelet (it calls the hook again): it neither polls nor moves SIGKILL
// at a shorter deletion, as the kubelet, which keeps its first grace.
func TestShorterDeletionWithAHookIsNotPolled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		api := pollPod(t0)
		f, _ := pollFixture(t, api, handlerTransport{api}, 40, fixtureOpts{})
		f.callPreStop(t.Context(), "?wait=0s").wait(t)
		synctest.Wait()
		reads := api.Reads()
		go func() {
			time.Sleep(4500 * time.Millisecond)
			api.Delete(time.Now(), 8*time.Second)
		}()
		rep := f.d.Shutdown(context.Background())

		assert.Equal(t, t0.Add(20*time.Second), rep.Budget.Kill, "the first deletion's SIGKILL")
		assert.Equal(t, reads+1, api.Reads(), "SIGTERM's read only")
	})
}

// A poll that fails is logged at Warn once, until a read succeeds again,
// and the drain goes on with the budget it has.
func TestPollFailuresAreLoggedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		api := pollPod(t0)
		f, logs := pollFixture(t, api, handlerTransport{api}, 10, fixtureOpts{})
		go func() {
			time.Sleep(1500 * time.Millisecond)
			api.Refuse(http.StatusServiceUnavailable)
			time.Sleep(5 * time.Second)
			api.Refuse(0)
		}()
		rep := f.d.Shutdown(context.Background())

		assert.Equal(t, 10, rep.Preserve.Counts[pause.Preserved])
		assert.Equal(t, t0.Add(20*time.Second), rep.Budget.Kill)
		require.Equal(t, 1, strings.Count(logs.String(), "could not be read during the shutdown"), logs.String())
		assert.Contains(t, logs.String(), "level=WARN")
	})
}

// Fault (a review of row 389): a force deletion (kubectl delete --force
// --grace-period=0) removes the pod from the API server while the kubelet
// still terminates it; the reads then got 404, a failed read, and the
// budget stood. A kubelet restarted then stops the container as an
// orphan's, 2 s after it stops it, a hook or not. Once a deletion was read,
// a 404 (or another pod in the name) plans SIGKILL for that restart.
//
//	0 s    deleted with 20 s; SIGTERM: 40 preserves of 1 s, one at a time
//	4.5 s  force-deleted: a kubelet restarted now kills 2 s after its stop
//	5 s    the poll's 404: SIGKILL planned at 4 s (the last read of the 20 s) + 2 s
func TestForceDeletionPlansForARestartedKubeletsOrphanCleanup(t *testing.T) {
	for _, hook := range []bool{false, true} {
		t.Run(map[bool]string{false: "no hook", true: "hook"}[hook], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				t0 := time.Now()
				api := pollPod(t0)
				f, logs := pollFixture(t, api, handlerTransport{api}, 40, fixtureOpts{})
				removeAt := 4500 * time.Millisecond
				if hook {
					f.callPreStop(t.Context(), "?wait=0s").wait(t)
				}
				go func() {
					time.Sleep(removeAt)
					api.Refuse(http.StatusNotFound) // the pod is gone
				}()
				if hook { // the hook's drain reads only at SIGTERM and at a SIGTERM again
					sigs := make(chan os.Signal, 2)
					done := make(chan *Report)
					go func() { done <- f.d.ServeSignals(context.Background(), sigs) }()
					sigs <- syscall.SIGTERM
					time.Sleep(removeAt + time.Second)
					sigs <- syscall.SIGTERM
					rep := <-done
					assert.Equal(t, t0.Add(2*time.Second), rep.Budget.Kill, "SIGTERM's read + 2 s: T0+%v", rep.Budget.Kill.Sub(t0))
					return
				}
				rep := f.d.Shutdown(context.Background())
				assert.Equal(t, t0.Add(6*time.Second), rep.Budget.Kill, "T0+%v", rep.Budget.Kill.Sub(t0))
				assert.Contains(t, logs.String(), "the pod was removed from the API server")
				assert.NotContains(t, logs.String(), "could not be read")
			})
		})
	}
}

// errTransport fails every request, with a text of its own each time, as
// a fresh connection's failure names its port.
type errTransport struct{ n *atomic.Int64 }

func (e errTransport) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, fmt.Errorf("read tcp 10.0.0.5:%d->10.96.0.1:443: connection reset by peer", 40000+e.n.Add(1))
}

// A poll failure whose text changes every time (a new connection's port)
// is still one failure: logged at Warn once, not every second.
func TestPollFailuresWithChangingTextAreLoggedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int64
		f, logs := pollFixture(t, &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv", UID: "uid-0"}, errTransport{&n}, 10, fixtureOpts{})
		rep := f.d.Shutdown(context.Background())
		assert.Equal(t, 10, rep.Preserve.Counts[pause.Preserved])
		assert.Greater(t, n.Load(), int64(5), "polled")
		assert.Equal(t, 1, strings.Count(logs.String(), "could not be read during the shutdown"), logs.String())
	})
}

// Fault (a review of row 389): a poll that found no deletionTimestamp was
// dropped, so when SIGTERM's read failed, a graceful node shutdown with
// Config.KubeletGrace was never planned for. A poll now gives it to the
// budget, once.
func TestPollFindsTheKubeletsOwnTerminationAfterSIGTERMsReadFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv", UID: "uid-0"} // not deleted
		api.Refuse(http.StatusServiceUnavailable)
		f, logs := pollFixture(t, api, handlerTransport{api}, 40, fixtureOpts{edit: func(c *Config) { c.KubeletGrace = 4 * time.Second }})
		go func() {
			time.Sleep(500 * time.Millisecond)
			api.Refuse(0)
		}()
		rep := f.d.Shutdown(context.Background())
		assert.Equal(t, t0.Add(4*time.Second), rep.Budget.Kill, "T0+%v", rep.Budget.Kill.Sub(t0))
		assert.Equal(t, 1, strings.Count(logs.String(), "the kubelet is terminating it on its own"), logs.String())
	})
}

// Fault: a drain whose first preStop call came after SIGTERM (its hook's
// call at the first run never reached the server: its listener was not up,
// say) answered it and let it go. A call of a run that began after SIGTERM
// is a restarted kubelet's, which gives the pod's grace again from that
// run: the budget now follows it, and a call of the first run, late, still
// tells nothing.
//
//	0 s    deleted with 20 s; SIGTERM (no call came): 40 preserves of 1 s
//	1 s    a late call of a run that began at 0 s: nothing changes
//	5 s    the restarted kubelet calls the hook: SIGKILL at 25 s
func TestHookCallAfterSIGTERMIsARestartedKubelet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		api := pollPod(t0)
		f, _ := pollFixture(t, api, handlerTransport{api}, 40, fixtureOpts{})
		startQuery := func(at time.Time) string {
			return "?start=" + url.QueryEscape(at.Format(time.RFC3339Nano)) + "&wait=0s"
		}
		go func() {
			time.Sleep(time.Second)
			f.callPreStop(context.Background(), startQuery(t0)).wait(t)
			time.Sleep(4 * time.Second)
			f.callPreStop(context.Background(), startQuery(time.Now())).wait(t)
		}()
		rep := f.d.Shutdown(context.Background())

		assert.Equal(t, t0.Add(5*time.Second), rep.Budget.Restart, "the restarted kubelet's run")
		assert.Equal(t, t0.Add(25*time.Second), rep.Budget.Kill, "SIGKILL at T0+%v", rep.Budget.Kill.Sub(t0))
		assert.Greater(t, rep.Preserve.Counts[pause.Preserved], 18, "the new run's time used: %v", rep.Preserve.Counts)
	})
}

// A pod gone before any read found its deletion, its UID never known (a
// name the API server may never have had), is a failed read, and a poll's
// is logged once, as any other: before, each poll's 404 was a Warn. (With
// its UID known it is a force deletion:
// TestForceDeletionBeforeAnyReadPlansTheKubeletsTwoSeconds.)
func TestPodGoneBeforeAnyDeletionReadIsLoggedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv"} // no UID: kube.Config.UID empty
		api.Refuse(http.StatusNotFound)
		f, logs := pollFixture(t, api, handlerTransport{api}, 10, fixtureOpts{})
		rep := f.d.Shutdown(context.Background())
		assert.Equal(t, t0.Add(20*time.Second), rep.Budget.Kill, "no deletion read: the budget stands")
		assert.Equal(t, 1, strings.Count(logs.String(), "could not be read during the shutdown"), logs.String())
		assert.Equal(t, 2, strings.Count(logs.String(), "the pod's deletion could not be read"), "SIGTERM's read and the polls' first: %s", logs.String())
	})
}
