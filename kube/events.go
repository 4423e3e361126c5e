package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Defaults for the Config fields about events, said in their docs.
const (
	defaultEventTimeout = 2 * time.Second // bounds one event's POST
	defaultEventQueue   = 16              // events that may wait to be posted
)

// The two event types Kubernetes knows.
const (
	Normal  = corev1.EventTypeNormal  // "Normal": things went as they should
	Warning = corev1.EventTypeWarning // "Warning": something went wrong
)

// reportingController is every event's reportingController: what a user
// filters on (kubectl get events --field-selector reportingComponent=drainkit).
const reportingController = "drainkit"

// API limits of an events.k8s.io/v1 Event.
const (
	maxReason   = 128
	maxAction   = 128
	maxNote     = 1024
	maxInstance = 128
	maxName     = 253
)

// An Event is one Kubernetes Event about the pod, as `kubectl describe pod`
// and `kubectl get events` show it. Record posts it as an
// events.k8s.io/v1 Event whose regarding object is the pod,
// reportingController "drainkit" and reportingInstance the pod's name.
type Event struct {
	// Type is Normal or Warning; empty means Normal.
	Type string
	// Reason is why the event happened, an UpperCamelCase identifier
	// ("DrainStarted", "SandboxesLost"); required, at most 128 bytes.
	Reason string
	// Action is what was done, an identifier ("Drain", "Preserve");
	// empty means "Drain". At most 128 bytes.
	Action string
	// Note is the sentence a person reads; it is cut to the API's 1 KiB.
	Note string
}

// EventStats counts what happened to the events a Pod recorded.
type EventStats struct {
	Posted  int `json:"posted"`  // accepted by the API server
	Dropped int `json:"dropped"` // refused, failed, timed out, or not sent for want of room or time
	// LastError says why the latest event was dropped.
	LastError string `json:"last_error,omitempty"`
}

// eventQueue is a Pod's bounded queue of events and the one goroutine,
// alive only while there is something to send, that posts them.
type eventQueue struct {
	p       *Pod
	timeout time.Duration
	size    int
	posted  metric.Int64Counter
	dropped metric.Int64Counter

	mu      sync.Mutex
	queue   []queued
	sending bool
	idle    chan struct{} // closed when the sender exits
	cancel  context.CancelFunc
	stats   EventStats
	seq     uint64

	// ended is why a Flush that waited for the running sender ended
	// (its context's error); that sender then posts nothing more and
	// drops what it finds. Nil otherwise.
	ended error
}

type queued struct {
	Event
	at  time.Time
	seq uint64
}

func (q *eventQueue) init(p *Pod, cfg Config) error {
	q.p, q.timeout, q.size = p, cfg.EventTimeout, cfg.EventQueue
	if q.timeout == 0 {
		q.timeout = defaultEventTimeout
	}
	if q.size == 0 {
		q.size = defaultEventQueue
	}
	mp := cfg.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(ScopeName)
	var err1, err2 error
	q.posted, err1 = m.Int64Counter("drainkit.kube.events.posted", metric.WithUnit("{event}"),
		metric.WithDescription("Kubernetes Events the API server accepted."))
	q.dropped, err2 = m.Int64Counter("drainkit.kube.events.dropped", metric.WithUnit("{event}"),
		metric.WithDescription("Kubernetes Events not posted: refused (RBAC), failed, timed out, or no room or time left to send them."))
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("kube: New: Config.MeterProvider: %w", err)
	}
	return nil
}

// Record posts e on the pod in the background and returns at once: it
// never blocks on the API server. Events are posted one at a time, in the
// order recorded, each within Config.EventTimeout. An event is dropped,
// with a log line and a count in EventStats and the
// drainkit.kube.events.dropped counter, when the queue holds
// Config.EventQueue events already (the API server is slow), when the API
// server refuses it (a 403: the service account may not create events) or
// does not answer in time (a 429 is posted again after its Retry-After
// when that fits in Config.EventTimeout), or when Flush's context ends first. An event
// without a Reason is dropped too. Record is safe for concurrent use. On
// a nil *Pod (New failed: no API access) it does nothing, so a server keeps
// one code path; nor on a zero Pod.
func (p *Pod) Record(e Event) {
	if !p.made() {
		return
	}
	q := &p.events
	at := time.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	if e.Reason == "" {
		q.drop(fmt.Errorf("an event needs a Reason (note %q)", e.Note), e)
		return
	}
	if len(q.queue) >= q.size {
		q.drop(fmt.Errorf("%d events already wait to be posted: the API server is slow", len(q.queue)), e)
		return
	}
	q.seq++
	q.queue = append(q.queue, queued{Event: e, at: at, seq: q.seq})
	if !q.sending {
		q.sending = true
		q.idle = make(chan struct{})
		go q.send()
	}
}

// Flush waits until every event recorded so far was posted or dropped (and
// the ones recorded while it waits: it waits for the queue to empty, so
// events recorded without pause keep it waiting), or until ctx ends; then
// it drops the events still waiting, cancels the one being posted, and
// returns once nothing is left running. It returns the counts since New.
// Call it before the process exits, with the time the process can spare:
// it is what bounds how long events may take. On a nil *Pod (or a zero
// one) it returns zero counts at once.
func (p *Pod) Flush(ctx context.Context) EventStats {
	if !p.made() {
		return EventStats{}
	}
	q := &p.events
	q.mu.Lock()
	idle := q.idle
	q.mu.Unlock()
	if idle != nil {
		select {
		case <-idle:
		case <-ctx.Done():
			q.mu.Lock()
			q.dropQueue(ctx.Err())
			if q.sending && q.idle == idle {
				q.ended = ctx.Err() // an event recorded from now on is not waited for
			}
			if q.cancel != nil {
				q.cancel()
			}
			q.mu.Unlock()
			<-idle // the POST in flight returns at once: its context is cancelled
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.stats
}

// drop counts e dropped for err, under its reason, and logs it. q.mu is
// held.
func (q *eventQueue) drop(err error, e Event) {
	q.stats.Dropped++
	q.stats.LastError = err.Error()
	q.dropped.Add(context.Background(), 1, metric.WithAttributes(attribute.String("drainkit.kube.event.reason", e.Reason)))
	q.p.log.Warn("kube: event dropped", "reason", e.Reason, "type", e.Type, "note", e.Note, "error", err)
}

// dropQueue drops every event still waiting, each under its own reason
// and with its own line, because a flush ended (why). q.mu is held.
func (q *eventQueue) dropQueue(why error) {
	for _, e := range q.queue {
		q.drop(fmt.Errorf("not posted before the flush ended: %w", why), e.Event)
	}
	q.queue = nil
}

// send posts the queued events one by one and exits when the queue is
// empty.
func (q *eventQueue) send() {
	for {
		q.mu.Lock()
		if q.ended != nil {
			q.dropQueue(q.ended)
		}
		if len(q.queue) == 0 {
			q.sending = false
			q.cancel = nil
			q.ended = nil
			close(q.idle)
			q.mu.Unlock()
			return
		}
		e := q.queue[0]
		q.queue = q.queue[1:]
		ctx, cancel := context.WithTimeout(context.Background(), q.timeout)
		q.cancel = cancel
		q.mu.Unlock()

		err := q.p.post(ctx, e)
		cancel()
		q.mu.Lock()
		if err != nil {
			q.drop(err, e.Event)
		} else {
			q.stats.Posted++
			q.posted.Add(context.Background(), 1, metric.WithAttributes(attribute.String("drainkit.kube.event.reason", e.Reason)))
		}
		q.mu.Unlock()
	}
}

// post creates e as an events.k8s.io/v1 Event regarding the pod.
func (p *Pod) post(ctx context.Context, e queued) error {
	p.mu.Lock()
	uid := p.uid
	p.mu.Unlock()
	if uid == "" {
		// kubectl describe pod finds events by the pod's UID: learn it.
		// Without it (no RBAC to get pods) the event still goes out.
		if _, err := p.get(ctx); err == nil {
			p.mu.Lock()
			uid = p.uid
			p.mu.Unlock()
		}
	}
	body, err := json.Marshal(p.event(e, uid))
	if err != nil {
		return err
	}
	u := p.host + "/apis/events.k8s.io/v1/namespaces/" + url.PathEscape(p.ns) + "/events"
	if _, _, err := p.do(ctx, http.MethodPost, u, body, http.StatusCreated, `"create" on "events" (apiGroups "events.k8s.io")`); err != nil {
		return fmt.Errorf("kube: POST event %s on pod %s/%s: %w", e.Reason, p.ns, p.name, err)
	}
	return nil
}

// event is e as the API object.
func (p *Pod) event(e queued, uid string) *eventsv1.Event {
	typ := e.Type
	if typ == "" {
		typ = Normal
	}
	action := e.Action
	if action == "" {
		action = "Drain"
	}
	// Unique per process and event, as client-go names them: the
	// object's name, a dot, the time in hex (and the sequence number,
	// should two events share a nanosecond).
	suffix := "." + strconv.FormatInt(e.at.UnixNano(), 16) + "-" + strconv.FormatUint(e.seq, 10)
	return &eventsv1.Event{
		TypeMeta: metav1.TypeMeta{APIVersion: "events.k8s.io/v1", Kind: "Event"},
		ObjectMeta: metav1.ObjectMeta{
			// A DNS label ends alphanumeric: the cut must not end the
			// name's on '-' or '.', the suffix's dot following.
			Name:      strings.TrimRight(cut(p.name, maxName-len(suffix)), "-.") + suffix,
			Namespace: p.ns,
		},
		EventTime:           metav1.NewMicroTime(e.at),
		ReportingController: reportingController,
		ReportingInstance:   cut(p.name, maxInstance),
		Action:              cut(action, maxAction),
		Reason:              cut(e.Reason, maxReason),
		Regarding: corev1.ObjectReference{
			APIVersion: "v1", Kind: "Pod", Namespace: p.ns, Name: p.name, UID: types.UID(uid),
		},
		Note: cut(e.Note, maxNote),
		Type: typ,
	}
}

// cut shortens s to at most n bytes, on a character boundary, as the API
// server counts them. Invalid UTF-8 (a process's output in an error) is
// replaced by U+FFFD first: encoding/json does so anyway, three bytes for
// each invalid one, which took a note within 1 KiB past the limit (the
// event refused), and a cut string with an invalid byte anywhere in it was
// shortened byte by byte to just before that byte.
func cut(s string, n int) string {
	s = strings.ToValidUTF8(s, string(utf8.RuneError))
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
