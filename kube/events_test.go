package kube_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/drainkit/drainkit/kube"
)

const testUID = types.UID("8d3c2f1e-0000-4000-8000-000000000001") // podJSON's

func TestRecordPostsEventsRegardingThePod(t *testing.T) {
	a, cfg := newAPIServer(t, podJSON(t, nil))
	p := newPod(t, cfg, testPod)
	before := time.Now()
	p.Record(kube.Event{Reason: "DrainStarted", Note: "plan: 3 sandboxes"})
	p.Record(kube.Event{Type: kube.Warning, Reason: "SandboxesLost", Action: "Preserve", Note: "1 lost: sb-2"})
	stats := p.Flush(t.Context())
	assert.Equal(t, kube.EventStats{Posted: 2}, stats)

	got := a.posted()
	require.Len(t, got, 2)
	for _, ev := range got {
		assert.Equal(t, "events.k8s.io/v1", ev.APIVersion)
		assert.Equal(t, "Event", ev.Kind)
		assert.Equal(t, testNamespace, ev.Namespace)
		assert.True(t, strings.HasPrefix(ev.Name, testPod+"."), ev.Name)
		assert.Equal(t, "drainkit", ev.ReportingController)
		assert.Equal(t, testPod, ev.ReportingInstance)
		// The UID comes from a read of the pod: kubectl describe finds
		// events by it.
		assert.Equal(t, "v1", ev.Regarding.APIVersion)
		assert.Equal(t, "Pod", ev.Regarding.Kind)
		assert.Equal(t, testNamespace, ev.Regarding.Namespace)
		assert.Equal(t, testPod, ev.Regarding.Name)
		assert.Equal(t, testUID, ev.Regarding.UID)
		assert.False(t, ev.EventTime.Before(&metav1.MicroTime{Time: before.Truncate(time.Microsecond)}), "eventTime %v", ev.EventTime)
		assert.Nil(t, ev.Series)
		assert.Zero(t, ev.DeprecatedCount) // the v1 API refuses the legacy fields
	}
	assert.NotEqual(t, got[0].Name, got[1].Name)
	assert.Equal(t, "DrainStarted", got[0].Reason)
	assert.Equal(t, kube.Normal, got[0].Type)
	assert.Equal(t, "Drain", got[0].Action)
	assert.Equal(t, "plan: 3 sandboxes", got[0].Note)
	assert.Equal(t, "SandboxesLost", got[1].Reason)
	assert.Equal(t, kube.Warning, got[1].Type)
	assert.Equal(t, "Preserve", got[1].Action)
	a.mu.Lock()
	assert.Equal(t, 1, a.gets, "the UID is read once")
	a.mu.Unlock()
}

func TestRecordUsesTheConfiguredUIDWithoutReadingThePod(t *testing.T) {
	a, cfg := newAPIServer(t, podJSON(t, nil))
	cfg.UID = "from-the-downward-api"
	p := newPod(t, cfg, testPod)
	p.Record(kube.Event{Reason: "DrainFinished"})
	assert.Equal(t, 1, p.Flush(t.Context()).Posted)
	got := a.posted()
	require.Len(t, got, 1)
	assert.Equal(t, types.UID("from-the-downward-api"), got[0].Regarding.UID)
	a.mu.Lock()
	defer a.mu.Unlock()
	assert.Zero(t, a.gets)
}

func TestRecordCutsTheNoteToTheAPIsLimit(t *testing.T) {
	a, cfg := newAPIServer(t, podJSON(t, nil))
	p := newPod(t, cfg, testPod)
	p.Record(kube.Event{Reason: "SandboxesLost", Note: strings.Repeat("é", 600)}) // 1200 bytes
	assert.Equal(t, 1, p.Flush(t.Context()).Posted)
	got := a.posted()
	require.Len(t, got, 1)
	assert.Len(t, got[0].Note, 1024)
	assert.Equal(t, strings.Repeat("é", 512), got[0].Note)
}

// meters returns a MeterProvider and a function that reads a counter's
// value for one event reason.
func meters(t *testing.T) (*sdkmetric.MeterProvider, func(name, reason string) int64) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return mp, func(name, reason string) int64 {
		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(t.Context(), &rm))
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != name {
					continue
				}
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					if v, ok := dp.Attributes.Value(attribute.Key("drainkit.kube.event.reason")); ok && v.AsString() == reason {
						return dp.Value
					}
				}
			}
		}
		return 0
	}
}

func TestRecordDropsWhatRBACRefusesWithALogLineAndACount(t *testing.T) {
	a, cfg := newAPIServer(t, podJSON(t, nil))
	a.postEvent = func(w http.ResponseWriter, _ *http.Request) {
		writeStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden,
			`events.events.k8s.io is forbidden: User "system:serviceaccount:agentenv:default" cannot create resource "events"`)
	}
	var logs bytes.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	mp, count := meters(t)
	cfg.MeterProvider = mp
	p := newPod(t, cfg, testPod)
	p.Record(kube.Event{Reason: "DrainStarted"})
	p.Record(kube.Event{Reason: "DrainFinished"})
	stats := p.Flush(t.Context())
	assert.Equal(t, 0, stats.Posted)
	assert.Equal(t, 2, stats.Dropped)
	assert.Contains(t, stats.LastError, "403")
	assert.Contains(t, stats.LastError, `RBAC "create" on "events"`)
	assert.Contains(t, stats.LastError, "DrainFinished")
	assert.Equal(t, 2, strings.Count(logs.String(), "kube: event dropped"), logs.String())
	assert.Equal(t, int64(1), count("drainkit.kube.events.dropped", "DrainStarted"))
	assert.Equal(t, int64(1), count("drainkit.kube.events.dropped", "DrainFinished"))
	assert.Equal(t, int64(0), count("drainkit.kube.events.posted", "DrainStarted"))
}

// The API server's admission answers 403 too, for what no RBAC rule would
// let through: every create in a namespace being deleted (`kubectl delete
// namespace`, which is how the pod is being ended), one past a quota. The
// drop said the service account needed RBAC "create" on "events", sending
// the operator after a rule that is there (row 1031; the real
// kube-apiserver's answer to an admin: internal/realapiserver's
// EventsInANamespaceBeingDeletedAreNotBlamedOnRBAC).
func TestEventRefusedByAdmissionIsNotBlamedOnRBAC(t *testing.T) {
	tests := []struct {
		name   string
		status string
		says   string
	}{
		{"namespace being deleted",
			`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"events.events.k8s.io \"x\" is forbidden: unable to create new content in namespace agentenv because it is being terminated","reason":"Forbidden","details":{"name":"x","group":"events.k8s.io","kind":"events","causes":[{"reason":"NamespaceTerminating","message":"namespace agentenv is being terminated","field":"metadata.namespace"}]},"code":403}`,
			"the namespace is being deleted: the API server creates nothing more in it, Events included; not RBAC"},
		{"quota",
			`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"events.events.k8s.io \"x\" is forbidden: exceeded quota: events, requested: count/events.events.k8s.io=1, used: count/events.events.k8s.io=100, limited: count/events.events.k8s.io=100","reason":"Forbidden","details":{"name":"x","group":"events.k8s.io","kind":"events"},"code":403}`,
			"exceeded quota: events, requested: count/events.events.k8s.io=1, used: count/events.events.k8s.io=100, limited: count/events.events.k8s.io=100 (refused by the API server's admission, not by RBAC)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, cfg := newAPIServer(t, podJSON(t, nil))
			a.postEvent = func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusForbidden)
				_, _ = io.WriteString(w, tc.status)
			}
			p := newPod(t, cfg, testPod)
			p.Record(kube.Event{Reason: "DrainStarted"})
			stats := p.Flush(t.Context())
			assert.Equal(t, 1, stats.Dropped)
			assert.Contains(t, stats.LastError, "403 Forbidden")
			assert.Contains(t, stats.LastError, tc.says)
			assert.NotContains(t, stats.LastError, "needs RBAC")
		})
	}
}

func TestRecordNeverBlocksOnASlowAPIServerAndFlushEndsByItsContext(t *testing.T) {
	a, cfg := newAPIServer(t, podJSON(t, nil))
	arrived := make(chan struct{}, 8)
	cancelled := make(chan struct{}, 8)
	a.postEvent = func(_ http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // then the server watches the connection
		arrived <- struct{}{}
		<-r.Context().Done() // hangs until the client gives up
		cancelled <- struct{}{}
	}
	cfg.UID = "u" // no GET first
	cfg.EventQueue = 2
	cfg.EventTimeout = time.Hour // only Flush ends the POST
	p := newPod(t, cfg, testPod)

	p.Record(kube.Event{Reason: "DrainStarted"})
	<-arrived // the first event is in flight, the queue is empty
	for _, r := range []string{"A", "B", "C", "D"} {
		p.Record(kube.Event{Reason: r}) // returns at once: A and B wait, C and D find the queue full
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	stats := p.Flush(ctx)
	assert.Equal(t, 0, stats.Posted)
	assert.Equal(t, 5, stats.Dropped)
	<-cancelled // the POST in flight was cancelled, not left running
	assert.Empty(t, arrived, "no queued event was sent after the flush ended")

	// The Pod keeps working after a flush that dropped events.
	a.mu.Lock()
	a.postEvent = nil
	a.mu.Unlock()
	p.Record(kube.Event{Reason: "DrainFinished"})
	stats = p.Flush(t.Context())
	assert.Equal(t, 1, stats.Posted)
	assert.Len(t, a.posted(), 1)
}

func TestRecordDropsAnEventWithoutAReason(t *testing.T) {
	_, cfg := newAPIServer(t, podJSON(t, nil))
	p := newPod(t, cfg, testPod)
	p.Record(kube.Event{Note: "no reason"})
	stats := p.Flush(t.Context())
	assert.Equal(t, 1, stats.Dropped)
	assert.Contains(t, stats.LastError, "Reason")
}

// A Flush with nothing recorded does not wait for its context: in virtual
// time, an hour's context, and no time passes. (With a context already
// ended, as before, a Flush that waited for it returned at once too.)
func TestFlushWithNothingRecordedReturnsAtOnce(t *testing.T) {
	_, cfg := newAPIServer(t, podJSON(t, nil))
	pod := newPod(t, cfg, testPod)
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		start := time.Now()
		assert.Equal(t, kube.EventStats{}, pod.Flush(ctx))
		assert.Zero(t, time.Since(start), "returned at once, not when its context ended")
	})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	assert.Equal(t, kube.EventStats{}, pod.Flush(ctx), "an ended context")
}

// A server whose New failed (no API access) keeps one code path: a nil
// *Pod records nothing, flushes at once, and its reads say why they fail.
func TestNilPodIsANoOpNotAPanic(t *testing.T) {
	var pod *kube.Pod
	pod.Record(kube.Event{Reason: "DrainStarted"})
	assert.Equal(t, kube.EventStats{}, pod.Flush(context.Background()))
	_, err := pod.Deletion(context.Background())
	assert.ErrorContains(t, err, "kube: Pod not made by kube.New")
}

// Flush returns by its context's deadline even when an event is recorded
// while it waits for the POST it cancelled: the sender posts nothing more
// once the flush has ended, and drops what it finds. It took the new
// event and posted it, so Flush waited one more EventTimeout.
//
//	Record(X) ── POST X hangs ─────────────┐ cancelled by Flush
//	Flush(ctx ended) ── waits for sender ──┤
//	                     Record(B) ────────┘ (as the POST of X returns)
//	                     B: dropped, never sent; Flush returns
func TestFlushDoesNotWaitForAnEventRecordedAfterItEnded(t *testing.T) {
	_, cfg := newAPIServer(t, podJSON(t, nil))
	var p *kube.Pod
	var mu sync.Mutex
	var sent []string
	inFlight := make(chan struct{})
	cfg.Client = &http.Client{Transport: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		var ev eventsv1.Event
		_ = json.NewDecoder(req.Body).Decode(&ev)
		mu.Lock()
		sent = append(sent, ev.Reason)
		mu.Unlock()
		if ev.Reason == "X" {
			close(inFlight)
		}
		<-req.Context().Done() // a slow API server
		if ev.Reason == "X" {
			p.Record(kube.Event{Reason: "B"}) // recorded after the flush ended
		}
		return nil, req.Context().Err()
	})}
	cfg.UID = "u" // no GET first
	cfg.EventTimeout = 2 * time.Second
	p = newPod(t, cfg, testPod)

	p.Record(kube.Event{Reason: "X"})
	<-inFlight
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	stats := p.Flush(ctx)
	assert.Equal(t, kube.EventStats{Dropped: 2, LastError: stats.LastError}, stats, "X and B dropped")
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"X"}, sent, "B was never sent")
}

// A note with bytes that are not UTF-8 (a process's output in a step's
// error): encoding/json sends each as U+FFFD, three bytes, which took a
// note of 1000 bytes to 1200 as the API server counts it (it refuses the
// event: note too long), and a note past 1 KiB was shortened byte by byte
// to just before its first such byte.
func TestRecordCutsANoteWithInvalidUTF8AsTheAPICountsIt(t *testing.T) {
	a, cfg := newAPIServer(t, podJSON(t, nil))
	p := newPod(t, cfg, testPod)
	within := strings.Repeat("x\xff", 500)                      // 1000 bytes, 500 of them invalid
	past := "step ublk: \xfe " + strings.Repeat("holder ", 300) // 2114 bytes, one invalid near the start
	p.Record(kube.Event{Reason: "StepFailed", Note: within})
	p.Record(kube.Event{Reason: "StepFailed", Note: past})
	assert.Equal(t, 2, p.Flush(t.Context()).Posted)
	got := a.posted()
	require.Len(t, got, 2)
	for _, ev := range got {
		assert.LessOrEqual(t, len(ev.Note), 1024, "the note as the API server counts it")
	}
	assert.True(t, strings.HasPrefix(got[0].Note, "x\uFFFDx\uFFFD"))
	assert.Greater(t, len(got[1].Note), 1000, "the note is cut at the limit, not at its first invalid byte: %q", got[1].Note)
}

// Fault (docs/faults.md row 232): an Event is named after its pod, cut to
// leave room for a unique suffix that starts with a dot. A pod name past
// about 233 characters was cut wherever the length fell, and a cut that
// ended on '-' or '.' made a name the API server refuses (a DNS label
// must end alphanumeric: "…ab-.19c2…" or "…ab-c..19c2…"), so every Event of
// that pod was refused and dropped. The cut now ends alphanumeric.
func TestEventNamesOfALongPodNameAreValid(t *testing.T) {
	for shift := range 5 { // the 5-character cycle puts the cut on every character of it
		name := strings.Repeat("x", shift+1) + strings.Repeat("ab-c.", 48) + "ab"
		require.Empty(t, validation.IsDNS1123Subdomain(name), "the pod's own name is valid")
		a, cfg := newAPIServer(t, podJSON(t, nil))
		p := newPod(t, cfg, name)
		p.Record(kube.Event{Reason: "DrainStarted", Note: "n"})
		require.Equal(t, 1, p.Flush(t.Context()).Posted)
		got := a.posted()
		require.Len(t, got, 1)
		assert.Empty(t, validation.IsDNS1123Subdomain(got[0].Name), "the Event's name %q", got[0].Name)
	}
}

// The events a Flush drops for want of time are each counted under their
// own reason and logged with their own line and note, as every dropped
// event is. They were counted all under the first one's reason, in one
// line with its note: drainkit.kube.events.dropped said DrainStarted 3 and
// SandboxesLost 0 when SandboxesLost was among them, and no line said which
// sandboxes its note named.
func TestEventsAFlushDropsAreEachCountedUnderTheirOwnReason(t *testing.T) {
	a, cfg := newAPIServer(t, podJSON(t, nil))
	arrived := make(chan struct{}, 8)
	a.postEvent = func(_ http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		arrived <- struct{}{}
		<-r.Context().Done() // hangs until the client gives up
	}
	var logs bytes.Buffer
	var logMu sync.Mutex
	cfg.Logger = slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, nil))
	mp, count := meters(t)
	cfg.MeterProvider = mp
	cfg.UID = "u" // no GET first
	cfg.EventTimeout = time.Hour
	p := newPod(t, cfg, testPod)

	p.Record(kube.Event{Reason: "Plan"})
	<-arrived // in flight; the next three wait in the queue
	p.Record(kube.Event{Reason: "DrainStarted", Note: "3 sandboxes"})
	p.Record(kube.Event{Reason: "SandboxesLost", Note: "lost: sb-7"})
	p.Record(kube.Event{Reason: "DrainFinished"})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	assert.Equal(t, 4, p.Flush(ctx).Dropped)
	for _, reason := range []string{"Plan", "DrainStarted", "SandboxesLost", "DrainFinished"} {
		assert.Equal(t, int64(1), count("drainkit.kube.events.dropped", reason), reason)
	}
	logMu.Lock()
	defer logMu.Unlock()
	assert.Equal(t, 4, strings.Count(logs.String(), "kube: event dropped"), logs.String())
	assert.Contains(t, logs.String(), `reason=SandboxesLost type="" note="lost: sb-7"`)
}

// lockedWriter serialises writes to w: the sender logs from its goroutine.
type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
