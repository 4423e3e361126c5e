package drain_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/draintest"
	"github.com/drainkit/drainkit/internal/fakeapiserver"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/termmsg"
	"github.com/drainkit/drainkit/kube"
	"github.com/drainkit/drainkit/pause"
)

// Fault: the Report copied the budget (Budget, and Headroom from its
// SIGKILL) before the drain stopped its reads of the pod, and a read that
// answered in between tightened the budget after the copy: the Report,
// its log line, DrainFinished and the termination message said SIGKILL at
// the 60 s of the first delete and 59.8 s of headroom, where the drain
// ended with SIGKILL at 10 s and 9.8 s left.
//
//	0 s ...... kubectl delete (grace 60 s), SIGTERM: the pod's read starts,
//	           and the API server is slow to answer it
//	0-0.2 s .. 2 preserves of 200 ms at once
//	0.2 s .... the step; kubectl delete --grace-period=10: deletionTimestamp
//	           at 10 s
//	0.2 s .... the drain stops its reads; the read's answer, already on its
//	           way, tightens SIGKILL to 10 s: that is the Report's
func TestReportIsTheBudgetTheDrainEndedWith(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv", UID: "uid-0"}
		t0 := time.Now()
		api.SetDeletion(t0.Add(time.Minute))
		second := t0.Add(10 * time.Second)
		budget, err := deadline.New(time.Minute, deadline.Config{Margin: time.Second})
		require.NoError(t, err)
		node := draintest.NewNode()
		node.AddN("sb", 2, 200*time.Millisecond)
		var logs logbuf.Buffer
		d, err := drain.New(drain.Config{
			Budget: budget, Sandboxes: node, Pod: slowPodReads(t, api),
			Pause: pause.Config{Limit: 2, Estimator: deadline.NewEstimator(200 * time.Millisecond)},
			Steps: []drain.Step{drain.NewStep(deadline.Phase{Name: "http", Reserve: deadline.Fixed(time.Second)},
				func(context.Context) (any, error) { api.SetDeletion(second); return nil, nil })},
			Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		})
		require.NoError(t, err)

		rep := d.Shutdown(t.Context())
		require.NoError(t, rep.Err())
		assert.True(t, budget.Kill().Equal(second), "the late read tightened the budget to the second delete's: SIGKILL %v after it", budget.Kill().Sub(second))
		assert.True(t, rep.Budget.Kill.Equal(second), "the Report's SIGKILL is the budget's at the end: %v after it", rep.Budget.Kill.Sub(second))
		want := second.Sub(rep.End) // the headroom there was
		assert.Equal(t, want, rep.Headroom)

		assert.Contains(t, logs.String(), "report.headroom="+want.String())
		var finished string
		for _, ev := range api.Events() {
			if ev.Reason == "DrainFinished" {
				finished = ev.Note
			}
		}
		assert.Contains(t, finished, fmt.Sprintf("finished %v before the expected SIGKILL", want.Round(time.Millisecond)))
		msg := termmsg.Summary(rep)
		assert.Contains(t, msg, "SIGKILL due +10.000s")
		assert.Contains(t, msg, fmt.Sprintf("exited %.3fs before SIGKILL", want.Seconds()))
	})
}

// slowPodReads is the pod reader of api, served in memory (synctest) by an
// API server that answers a read of the pod only once the read's context
// is done (the drain stopping its reads, or the read's own timeout), with
// what it holds by then: an answer already on its way when the drain
// stopped reading. Every other request (the Events) it answers at once.
func slowPodReads(t *testing.T, api *fakeapiserver.Pod) *kube.Pod {
	t.Helper()
	token := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(token, []byte("t"), 0o600))
	pod, err := kube.New(api.Name, kube.Config{Host: "https://api.test", Namespace: api.Namespace, UID: api.UID, TokenFile: token,
		Client: &http.Client{Transport: answerAtCancel{api}}})
	require.NoError(t, err)
	return pod
}

type answerAtCancel struct{ h http.Handler }

func (t answerAtCancel) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet {
		<-r.Context().Done()
	}
	if r.Body == nil { // a server never hands its handler a nil Body
		r = r.Clone(r.Context())
		r.Body = http.NoBody
	}
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}

// Fault: a read of the pod's deletion still in flight when the drain ended
// (an API server slow to answer the SIGTERM read) is stopped by the drain,
// as it must be before the Report is made, and that was logged at WARN,
// "the pod's deletion could not be read: the budget stands", on every such
// drain: a warning for the drain doing what it should, read by an operator
// as an API server or RBAC fault. It is now a DEBUG line; a read that
// fails on its own (its 2 s timeout) is still a warning.
//
//	0 s ...... preStop call: its read of the pod starts, never answered
//	2 s ...... that read times out: WARN
//	3 s ...... SIGTERM: its read starts, never answered; 1 sandbox, 200 ms
//	3.2 s .... the drain ends and stops the read: DEBUG
func TestPodReadStoppedAtTheDrainsEndIsNoWarning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv", UID: "uid-0"}
		api.SetDeletion(time.Now().Add(time.Minute))
		budget, err := deadline.New(time.Minute, deadline.Config{Margin: time.Second})
		require.NoError(t, err)
		node := draintest.NewNode()
		node.AddN("sb", 1, 200*time.Millisecond)
		var logs logbuf.Buffer
		d, err := drain.New(drain.Config{
			Budget: budget, Sandboxes: node, Pod: unansweredPodReads(t, api),
			Pause:  pause.Config{Estimator: deadline.NewEstimator(200 * time.Millisecond)},
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		})
		require.NoError(t, err)

		hook := httptest.NewRecorder()
		d.PreStop().ServeHTTP(hook, httptest.NewRequest(http.MethodGet, "/drain?wait=0s", nil))
		require.Equal(t, http.StatusOK, hook.Code)
		time.Sleep(3 * time.Second)
		rep := d.Shutdown(t.Context())
		require.NoError(t, rep.Err())

		const failed = `msg="drain: the pod's deletion could not be read: the budget stands"`
		assert.Contains(t, logs.String(), "level=WARN "+failed+" at=preStop", "a read that timed out on its own")
		assert.NotContains(t, logs.String(), failed+" at=SIGTERM")
		assert.Contains(t, logs.String(), `level=DEBUG msg="drain: a read of the pod's deletion was stopped: the drain ended" at=SIGTERM`)
	})
}

// unansweredPodReads is the pod reader of api, served in memory (synctest)
// by an API server that never answers a read of the pod: the read returns
// its context's error. Every other request (the Events) it answers at once.
func unansweredPodReads(t *testing.T, api *fakeapiserver.Pod) *kube.Pod {
	t.Helper()
	token := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(token, []byte("t"), 0o600))
	pod, err := kube.New(api.Name, kube.Config{Host: "https://api.test", Namespace: api.Namespace, UID: api.UID, TokenFile: token,
		Client: &http.Client{Transport: noAnswer{api}}})
	require.NoError(t, err)
	return pod
}

type noAnswer struct{ h http.Handler }

func (t noAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet {
		<-r.Context().Done()
		return nil, r.Context().Err()
	}
	return answerAtCancel(t).RoundTrip(r)
}
