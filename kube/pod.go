package kube

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/drainkit/drainkit/deadline"
)

// ScopeName is the OpenTelemetry instrumentation scope of this package.
const ScopeName = "github.com/drainkit/drainkit/kube"

// ServiceAccountDir is where Kubernetes mounts a pod's service account:
// the files token, ca.crt and namespace.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// maxPodBytes bounds how much of a response is read; a Pod object with
// managed fields is tens of kilobytes.
const maxPodBytes = 4 << 20

// Config says how to reach the API server and which pod this is. Its zero
// value is the in-cluster configuration: every empty field is taken from
// what Kubernetes mounts into a pod.
type Config struct {
	// Host is the API server's base URL, for example
	// "https://10.96.0.1:443". It must use https. Empty means
	// https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT.
	Host string
	// Namespace is the pod's namespace. Empty means the namespace file in
	// ServiceAccountDir.
	Namespace string
	// UID is the pod's metadata.uid (Downward API: fieldRef metadata.uid).
	// Events name it so that `kubectl describe pod` lists them. Empty means
	// it is learned from the first read of the pod (a mirror pod's
	// kubernetes.io/config.mirror annotation, for a static pod), or from
	// the pod's own token, bound to its UID, when the API server refuses
	// that token because the pod is gone (IsNotFound). A read that finds the
	// name naming another UID or no pod before any read found this UID
	// there is kept as Identity's Mismatch: read at start, the name or
	// UID is wrong. A static pod's metadata.uid, which the kubelet gives
	// the Downward API, is its own (the manifest's config hash), not the
	// UID the API server gave the kubelet's mirror pod of it; the mirror
	// pod carries it in its kubernetes.io/config.mirror annotation, so a
	// pod of this name whose UID or whose annotation is UID is this pod.
	UID string
	// TokenFile holds the bearer token. It is read on every request,
	// because the kubelet rotates projected service account tokens. Empty
	// means the token file in ServiceAccountDir.
	TokenFile string
	// CAFile holds the PEM certificates the API server's certificate must
	// chain to; it is read on every request. Empty means the ca.crt file
	// in ServiceAccountDir. It is not used when Client is set.
	CAFile string
	// Client sends the requests. Nil means a fresh connection per request
	// that trusts only the certificates in CAFile, uses no proxy, and is
	// closed afterwards (a terminating pod makes a handful of requests,
	// and one a second while a drain with no preStop call polls its
	// deletion: nothing worth keeping alive across a second). Whichever
	// client, no redirect is followed (a 3xx is an *APIError): a Client
	// set here is used through a copy whose CheckRedirect says so, the
	// Client itself unchanged.
	Client *http.Client
	// EventTimeout bounds each event's POST; zero means 2 s. Reads of the pod are bounded by their context.
	EventTimeout time.Duration
	// EventQueue is how many events may wait to be posted; one more is
	// dropped. Zero means 16.
	EventQueue int
	// Logger receives a line for every event dropped. Nil discards.
	Logger *slog.Logger
	// TracerProvider traces every read of the pod as a client span under
	// ScopeName, named for the method that made it: "kube.Pod.Deletion"
	// (Deletion, DeletionTimestamp, Tighten), "kube.Pod.Grace",
	// "kube.Pod.Priority", "kube.Pod.PreStopSleeps", "kube.Pod.Spec". Nil means
	// otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// MeterProvider counts events posted and dropped
	// (drainkit.kube.events.posted, drainkit.kube.events.dropped). Nil
	// means otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
}

// A Pod is one pod's view of the Kubernetes API server: it reads the pod's
// deletion state (how a server learns that kubectl delete --grace-period=30
// or an eviction cut its grace below the manifest's) and posts Kubernetes
// Events on the pod. Make one with New. It is safe for concurrent use.
//
// It speaks plain HTTPS (GET /api/v1/namespaces/{ns}/pods/{name}, POST
// /apis/events.k8s.io/v1/namespaces/{ns}/events) with a bearer token. The
// pod's service account needs RBAC permission to get its own pod and to
// create events (see the package documentation); a request it may not make
// fails with an *APIError with StatusCode 403.
//
// A Pod not made by New (the zero value, or a nil *Pod, as New returns
// when it fails) sends no request: Deletion, DeletionTimestamp, Grace,
// Priority and Tighten return the error "kube: Pod not made by kube.New",
// Record does nothing, Flush returns zero counts, and Name and Namespace
// are empty.
type Pod struct {
	host, ns, name, token, ca string
	client                    *http.Client
	tracer                    trace.Tracer
	log                       *slog.Logger
	events                    eventQueue

	mu         sync.Mutex
	uid        string
	configured bool          // uid is Config.UID's, not learned
	confirmed  bool          // a read found this name with uid; guarded by mu
	static     bool          // a read found this pod through its mirror pod; guarded by mu
	mismatch   error         // the first read, none confirmed, that found the name not uid's; guarded by mu
	skewLog    time.Duration // the clock offset last logged; guarded by mu
	deleted    time.Time     // the deletionTimestamp a read of this pod last found, the API server's clock; guarded by mu
	took       string        // the binding of the last pod-bound token the API server took (tokenClaims.binding); guarded by mu
}

// New returns the Pod called name (pass it through the Downward API: env
// POD_NAME from fieldRef metadata.name), configured by cfg, whose empty
// fields come from the pod's mounted service account.
//
// It fails, naming every missing or unusable piece, if name is empty, an
// environment variable it needs is unset, a file it needs is missing or
// empty, CAFile holds no PEM certificate, or Host is not an https URL. It
// sends no request.
func New(name string, cfg Config) (*Pod, error) {
	return newPod(name, cfg, os.Getenv, ServiceAccountDir)
}

func newPod(name string, cfg Config, getenv func(string) string, dir string) (*Pod, error) {
	var errs []error
	if name == "" {
		errs = append(errs, errors.New("name: pod name must not be empty (set it from the Downward API, fieldRef metadata.name)"))
	}
	if cfg.Host == "" {
		host, port := getenv("KUBERNETES_SERVICE_HOST"), getenv("KUBERNETES_SERVICE_PORT")
		if host == "" {
			errs = append(errs, errors.New("Config.Host is empty and KUBERNETES_SERVICE_HOST is not set (not running in a pod?)"))
		}
		if port == "" {
			errs = append(errs, errors.New("Config.Host is empty and KUBERNETES_SERVICE_PORT is not set (not running in a pod?)"))
		}
		cfg.Host = "https://" + net.JoinHostPort(host, port)
	} else if u, err := url.Parse(cfg.Host); err != nil || u.Scheme != "https" || u.Host == "" {
		errs = append(errs, fmt.Errorf("Config.Host %q must be an https:// URL", cfg.Host))
	}
	if cfg.TokenFile == "" {
		cfg.TokenFile = filepath.Join(dir, "token")
	}
	if _, err := readToken(cfg.TokenFile); err != nil {
		errs = append(errs, fmt.Errorf("Config.TokenFile: %w", err))
	}
	if cfg.Client == nil {
		if cfg.CAFile == "" {
			cfg.CAFile = filepath.Join(dir, "ca.crt")
		}
		if _, err := loadCA(cfg.CAFile); err != nil {
			errs = append(errs, fmt.Errorf("Config.CAFile: %w", err))
		}
	}
	if cfg.Namespace == "" {
		path := filepath.Join(dir, "namespace")
		ns, err := os.ReadFile(path)
		cfg.Namespace = strings.TrimSpace(string(ns))
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("Config.Namespace is empty and the namespace file is unreadable: %w", err))
		case cfg.Namespace == "":
			errs = append(errs, fmt.Errorf("Config.Namespace is empty and so is the namespace file %s", path))
		}
	}
	if cfg.EventTimeout < 0 {
		errs = append(errs, fmt.Errorf("Config.EventTimeout must not be negative, got %v", cfg.EventTimeout))
	}
	if cfg.EventQueue < 0 {
		errs = append(errs, fmt.Errorf("Config.EventQueue must not be negative, got %d", cfg.EventQueue))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("kube: New: %w", errors.Join(errs...))
	}
	p := &Pod{
		host: strings.TrimSuffix(cfg.Host, "/"), ns: cfg.Namespace, name: name, uid: cfg.UID, configured: cfg.UID != "",
		token: cfg.TokenFile, ca: cfg.CAFile, log: cfg.Logger,
	}
	if cfg.Client != nil {
		// A copy that follows no redirect, as the Pod's own client: the
		// caller's follows them as net/http does, the token with it.
		c := *cfg.Client
		c.CheckRedirect = noRedirect
		p.client = &c
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	tp := cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	p.tracer = tp.Tracer(ScopeName)
	if err := p.events.init(p, cfg); err != nil {
		return nil, err
	}
	return p, nil
}

// Name returns the pod's name.
func (p *Pod) Name() string {
	if !p.made() {
		return ""
	}
	return p.name
}

// Namespace returns the pod's namespace.
func (p *Pod) Namespace() string {
	if !p.made() {
		return ""
	}
	return p.ns
}

// UID returns the pod's metadata.uid: Config.UID, else what the first
// successful read found, or the pod's own token (bound to the pod's UID)
// once the API server refused it as the pod's removal (IsNotFound); empty
// until then, and for a Pod not made by New.
// A UID learned means the API server had this pod under its name; one
// configured, only once a read found it there (Identity.Confirmed): a
// Config.UID or a name that is wrong reads, at every read, as the pod
// removed or replaced (Identity.Mismatch).
func (p *Pod) UID() string {
	if !p.made() {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.uid
}

// Identity is what the reads of the pod so far showed of whether the pod
// the API server has under this name is this one (Pod.Identity).
type Identity struct {
	// UID is Pod.UID's: Config.UID, else what the first read found.
	UID string
	// Configured is whether UID is Config.UID's, not learned from a read.
	Configured bool
	// Confirmed is whether a read found the pod of this name with UID (its
	// metadata.uid, or its kubernetes.io/config.mirror annotation: a static
	// pod's mirror pod, Config.UID): the API server had this pod under this
	// name, so a later 404 is its removal (a force deletion) and another
	// UID its replacement.
	Confirmed bool
	// Mismatch is the error of the first read that found the name not
	// naming the pod of UID while no read had confirmed it:
	// ErrPodReplaced (another UID under the name) or an *APIError that
	// IsNotFound reports (no pod of the name). Found while this process
	// starts, its pod running, it means the name or Config.UID is not this
	// pod's (a misconfigured POD_NAME or POD_UID), not a deletion: a
	// running pod's name names it. Not yet for a static pod, whose mirror
	// pod the kubelet may make after it started the pod: see
	// MirrorPending. Nil when no read found one.
	Mismatch error
	// Static is whether a read found this pod through a mirror pod (one
	// with a kubernetes.io/config.mirror annotation, UID's when UID is
	// configured): this pod is a static pod, which the kubelet runs from
	// a manifest and stops only when the manifest is removed, with its
	// grace and no deletion the API server shows. Deletion then returns
	// ErrStaticPod.
	Static bool
}

// MirrorPending reports whether the reads so far are a static pod's before
// the kubelet made its mirror pod in the API server: none confirmed the
// pod, Mismatch is a 404 (no pod of the name), and UID, configured, is a
// static pod's, the kubelet's config hash (32 hex digits, where the API
// server's UIDs are UUIDs). The kubelet starts a static pod whether it
// could make the mirror pod or not (at the node's boot, before it reached
// the API server or registered the node) and makes it later, so a read at
// start can come first: that Mismatch says nothing wrong yet, and a later
// read finds the pod through the mirror (Confirmed, Static). A read that
// still finds no pod once the mirror pod should be there (at the drain) is
// the misconfiguration Mismatch says: a POD_NAME that is not the mirror
// pod's name (the manifest's, a dash, the node's), or a kubelet that cannot
// reach the API server.
func (id Identity) MirrorPending() bool {
	return id.Mismatch != nil && !id.Confirmed && id.Configured && IsNotFound(id.Mismatch) && configHash(id.UID)
}

// configHash reports whether uid has the form of the UID the kubelet gives
// a static pod read from a manifest file or URL: its config hash, the MD5
// of the pod and its source in 32 lowercase hex digits (the kubelet's
// applyDefaults; measured under v1.34.4: 8fb7d682d2b909879f09896abd5a5797),
// which no UID the API server gives has (a UUID: 36 characters with
// dashes, 92037df5-5a1e-4de2-a506-d02a38986a89). A static pod whose
// manifest sets its own metadata.uid keeps that one and is not told by it.
func configHash(uid string) bool {
	if len(uid) != 32 {
		return false
	}
	for _, c := range uid {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Identity returns what the reads so far showed of this pod's identity;
// the zero Identity for a Pod not made by New.
func (p *Pod) Identity() Identity {
	if !p.made() {
		return Identity{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return Identity{UID: p.uid, Configured: p.configured, Confirmed: p.confirmed, Mismatch: p.mismatch, Static: p.static}
}

// mismatched records err, of a read that found the name not naming the
// pod of UID, as the Identity's Mismatch when it is the first and no read
// confirmed the UID. Called with mu held.
func (p *Pod) mismatched(err error) {
	if !p.confirmed && p.mismatch == nil {
		p.mismatch = err
	}
}

// errNotMade is the error of the reads of a Pod not made by New.
var errNotMade = errors.New("kube: Pod not made by kube.New")

// made reports whether p was made by New.
func (p *Pod) made() bool { return p != nil && p.tracer != nil }

// Deletion is what the API server recorded when the pod was deleted.
type Deletion struct {
	// Timestamp is metadata.deletionTimestamp: the deletion request time
	// plus the grace period, the time the kubelet will SIGKILL the pod, in
	// this node's clock. Not after a second, shorter deletion: the API
	// server then sets it to the FIRST deletion's time plus the new grace,
	// while the kubelet (v1.34, measured) keeps the grace its termination
	// started with. The API server wrote it in its own clock, and
	// the kubelet times the grace in the node's: when the response's Date
	// header proves the two clocks apart, Timestamp is the server's value
	// less that offset (ClockOffset), so that it can be compared with
	// time.Now. The API server stores it with whole-second precision, so
	// it reads up to 1 s early; Budget.Tighten therefore errs on the safe
	// side.
	Timestamp time.Time
	// ClockOffset is how far the API server's clock was found ahead of
	// this node's (negative: behind) by the read, and Timestamp corrected
	// by: the least offset the response's Date header (whole seconds, sent
	// between the request and its answer) proves, zero when it proves none
	// (clocks within about a second and the read's round trip of each
	// other, or no Date). An offset the read cannot prove stays in
	// Timestamp, so a node whose clock is behind the API server's still
	// reads SIGKILL up to that second and round trip late.
	ClockOffset time.Duration
	// Grace is metadata.deletionGracePeriodSeconds: the grace period the
	// deletion asked for, which the kubelet uses instead of the manifest's
	// terminationGracePeriodSeconds. Zero if the field is absent. A 0 (a
	// force deletion, kubectl delete --force --grace-period=0, of a pod
	// that a finalizer keeps in the API server) is 1 s, which the kubelet
	// gives it ("no matter what, we always supply a grace period of 1"),
	// and Timestamp is then the deletion's time plus that second: as
	// SpecGrace, never read as no grace. Without a finalizer the API
	// server removes the pod at once, and a read finds none (IsNotFound).
	Grace time.Duration
	// SpecGrace is spec.terminationGracePeriodSeconds: the most a
	// termination the kubelet makes on its own gives the pod (graceful
	// node shutdown and a node-pressure eviction give at most it; a
	// liveness probe's own terminationGracePeriodSeconds, when set, may
	// give more). 1 s for a 0, which the kubelet gives such a pod (see
	// Spec.Grace); zero if the field is absent, negative or more than a
	// Duration holds. Deletion returns it with ErrNotTerminating too.
	SpecGrace time.Duration
}

// ErrNotTerminating is returned by Pod.Deletion (and Tighten) when the pod
// has no deletionTimestamp yet: nobody deleted it, or it is being stopped
// by graceful node shutdown, which does not set one, or it is a static pod
// whose manifest was removed: the kubelet stops it with its grace and
// deletes its mirror pod only once it stopped terminating (its
// HandlePodCleanups), so a read at SIGTERM finds the mirror pod with none
// (measured under the real kubelet v1.34.4).
var ErrNotTerminating = errors.New("kube: pod has no deletionTimestamp (not terminating)")

// ErrStaticPod is returned by Pod.Deletion (and Tighten, DeletionTimestamp)
// for a static pod (Identity.Static), whatever its mirror pod shows. It
// wraps ErrNotTerminating, which it is as far as any read can tell, and
// comes with the Deletion's SpecGrace when the mirror pod was read.
// Deleting a mirror pod does not stop the static pod: the kubelet deletes
// the mirror and makes a new one (its syncPod; a mirror pod "cannot be
// controlled" from the API server), and stops the static pod only when its
// manifest is removed, with the manifest's grace from SIGTERM. So a mirror
// pod's deletionTimestamp (kubectl delete --grace-period), its 404 after a
// force deletion, and a new mirror pod with another API UID and the same
// annotation say nothing of when the kubelet kills this pod.
var ErrStaticPod = fmt.Errorf("%w: a static pod, whose deletion the API server does not show (its mirror pod's deletion is not its)", ErrNotTerminating)

// ErrPodReplaced is returned by Pod.Deletion (and Tighten, Grace) when the
// pod the API server has under this pod's name is another one: neither its
// UID nor, a static pod's mirror pod, its kubernetes.io/config.mirror
// annotation is the one in Config.UID or the one the first read found.
// This pod was
// deleted (kubectl delete --force, which does not wait for the kubelet) and
// a new one created in its name (a StatefulSet's), or, for a static pod
// found through its mirror pod (Identity.Static), another static pod's
// mirror pod is under its name: its manifest was replaced (a new config
// hash), which no deletion in the API server does; the error says which.
// What that pod says of its deletion is not this pod's. Events keep naming
// this pod's UID.
var ErrPodReplaced = errors.New("kube: the pod of this name is another pod")

// APIError is a response from the API server other than success. Message
// and Reason come from the metav1.Status body when there is one. For a 401
// Unauthorized, which says nothing more, Error says why the token was
// refused as far as its claims show: expired, bound to another pod, of an
// audience the API server was not seen to take, or the pod's own token,
// which the API server refuses once the pod is gone (IsNotFound).
type APIError struct {
	StatusCode int    // HTTP status, e.g. 403 or 404
	Reason     string // Status.reason, e.g. "Forbidden", "NotFound"
	Message    string // Status.message, or the start of the body
	// Need is the RBAC rule the request needed, named in Error for a 403
	// of the API server's authorization: `"get" on "pods"` or `"create"
	// on "events"`. Not for a 403 of its admission (a namespace being
	// deleted, a quota), which no rule would change.
	Need string

	// refused says, for a 401, why the token was refused as far as its
	// claims show (Pod.refused), and for a 403 of admission what refused
	// the request, in place of Need; gone, that the 401 is to the pod's
	// own token and the pod's removal, which IsNotFound reports; podless,
	// that a 404 names no pod (notAPod), which IsNotFound does not report.
	refused string
	gone    bool
	podless bool
}

// Error says which status the API server answered and why.
func (e *APIError) Error() string {
	msg := fmt.Sprintf("kube: API server: %d %s", e.StatusCode, http.StatusText(e.StatusCode))
	if e.Message != "" {
		msg += ": " + e.Message
	}
	if e.podless {
		msg += " (" + podlessNote + ")"
	}
	if e.StatusCode == http.StatusForbidden && e.Need != "" && e.refused == "" {
		msg += " (the pod's service account needs RBAC " + e.Need + ")"
	}
	if e.refused != "" {
		msg += " (" + e.refused + ")"
	}
	return msg
}

// A DeletionReader reads the pod's metadata.deletionTimestamp, returning
// ErrNotTerminating while there is none. *Pod is one; tests fake it.
type DeletionReader interface {
	DeletionTimestamp(ctx context.Context) (time.Time, error)
}

// DeletionTimestamp returns the pod's metadata.deletionTimestamp, the
// absolute SIGKILL time, with the errors of Deletion.
func (p *Pod) DeletionTimestamp(ctx context.Context) (time.Time, error) {
	d, err := p.Deletion(ctx)
	return d.Timestamp, err
}

// Deletion reads the pod and returns its deletion state. It returns
// ErrNotTerminating, with the Deletion's SpecGrace, if the pod has no
// deletionTimestamp yet (it is not being deleted, or the kubelet stops it
// on its own, as graceful node shutdown does, which sets none),
// ErrStaticPod (which is ErrNotTerminating) for a static pod, whatever
// its mirror pod's deletion or a 404 after it,
// ErrPodReplaced if the pod of its name is another one (another UID), an
// *APIError for an answer other than 200, and ctx's error if ctx ends
// first. It returns by ctx's deadline.
func (p *Pod) Deletion(ctx context.Context) (Deletion, error) {
	if !p.made() {
		return Deletion{}, errNotMade
	}
	ctx, span := p.startSpan(ctx, "kube.Pod.Deletion")
	defer span.End()
	obj, err := p.get(ctx)
	var d Deletion
	if err == nil {
		d, err = obj.deletion()
	}
	if p.Identity().Static && (err == nil || errors.Is(err, ErrNotTerminating) || IsNotFound(err)) {
		// The mirror pod's deletion, or its removal, is not this pod's.
		d, err = Deletion{SpecGrace: d.SpecGrace}, fmt.Errorf("kube: pod %s/%s: %w (read: %s)", p.ns, p.name, ErrStaticPod, staticRead(obj, err))
	}
	switch {
	case err == nil:
		span.SetAttributes(attribute.String("k8s.pod.deletion_timestamp", d.Timestamp.UTC().Format(time.RFC3339)),
			attribute.Int64("k8s.pod.deletion_grace_period_seconds", int64(d.Grace/time.Second)))
		if off := obj.offset; off != 0 {
			// The kubelet's SIGKILL comes G after it saw the deletion, by
			// the node's clock: the server's timestamp, read as it is,
			// would put it off by the offset (a node 5 minutes ahead: a
			// 30 s grace read as 4m30s past, no budget at all).
			d.Timestamp, d.ClockOffset = d.Timestamp.Add(-off), off
			span.SetAttributes(attribute.Int64("drainkit.kube.clock_offset_ms", off.Milliseconds()))
			if (off >= time.Second || off <= -time.Second) && p.newSkew(off) {
				p.log.Warn("kube: the API server's clock is not this node's: the pod's deletionTimestamp is read in this node's clock",
					"offset", off, "deletion_timestamp", d.Timestamp)
			}
		}
	case errors.Is(err, ErrNotTerminating):
		span.SetAttributes(attribute.Bool("k8s.pod.terminating", false))
	default:
		endSpanError(span, err)
	}
	return d, err
}

// newSkew reports whether a clock offset of off is news: the first, or
// one that moved more than skewNews from the one last logged (a read
// measures it within about a second: the Date header's whole seconds). One
// Warn per offset, not one per read of a drain that reads every second.
func (p *Pod) newSkew(off time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.skewLog != 0 && (off-p.skewLog).Abs() <= skewNews {
		return false
	}
	p.skewLog = off
	return true
}

// skewNews is how far the clock offset must move to be logged again.
const skewNews = 2 * time.Second

// Grace reads the pod's spec.terminationGracePeriodSeconds: the grace the
// kubelet gives the pod unless a deletion asks for less (see Deletion). A
// server can size its budget with it at start instead of repeating the
// manifest's number in a flag. A grace of 0 is 1 s, which the kubelet gives
// it. It returns an *APIError for an answer other than 200, an error if the
// spec has no grace, a negative one or one longer than a time.Duration
// holds (292 years), and ctx's error if ctx ends first.
func (p *Pod) Grace(ctx context.Context) (time.Duration, error) {
	return readSpec(p, ctx, "kube.Pod.Grace", func(spec Spec, span trace.Span) (time.Duration, error) {
		if g := spec.s.TerminationGracePeriodSeconds; g != nil {
			span.SetAttributes(attribute.Int64("k8s.pod.termination_grace_period_seconds", *g))
		}
		return spec.Grace()
	})
}

// Priority reads the pod's spec.priority: its PriorityClass's value (0
// without one), which picks the group of the kubelet's graceful node
// shutdown whose slice the pod gets (system-node-critical's is above
// 2000000000). It returns an *APIError for an answer other than 200, and
// ctx's error if ctx ends first.
func (p *Pod) Priority(ctx context.Context) (int32, error) {
	return readSpec(p, ctx, "kube.Pod.Priority", func(spec Spec, span trace.Span) (int32, error) {
		span.SetAttributes(attribute.Int64("k8s.pod.priority", int64(spec.Priority())))
		return spec.Priority(), nil
	})
}

// PreStopSleeps reads the preStop hook of each of the pod's containers
// (spec.containers and the native sidecars, init containers with
// restartPolicy Always, whose hooks the kubelet runs too; by name): the seconds of a sleep hook
// (lifecycle.preStop.sleep.seconds, KEP-3960), zero for a container with
// no hook or another kind. The kubelet runs a container's sleep before its
// SIGTERM, out of its grace: a server planning its budget needs its own
// container's (deadline.Config.PreStopSleep). It returns an *APIError for
// an answer other than 200, an error for a sleep that is negative or
// longer than a time.Duration holds, and ctx's error if ctx ends first.
func (p *Pod) PreStopSleeps(ctx context.Context) (map[string]time.Duration, error) {
	return readSpec(p, ctx, "kube.Pod.PreStopSleeps", func(spec Spec, _ trace.Span) (map[string]time.Duration, error) {
		return spec.PreStopSleeps()
	})
}

// Spec reads the pod's spec once: what Grace, Priority and PreStopSleeps
// each read, from one answer, for a server that plans with all three at
// start (one request, so one timeout when the API server does not answer,
// not three). The spec's fields it reads do not change in a pod's life.
// It returns an *APIError for an answer other than 200, and ctx's error if
// ctx ends first; what is wrong with a field is its method's error.
func (p *Pod) Spec(ctx context.Context) (Spec, error) {
	return readSpec(p, ctx, "kube.Pod.Spec", func(spec Spec, _ trace.Span) (Spec, error) { return spec, nil })
}

// readSpec reads the pod's spec under a client span named name and
// returns what field makes of it (field may set the span's attributes):
// the one body of Grace, Priority, PreStopSleeps and Spec. A failed read,
// or field's error, ends the span in error.
func readSpec[T any](p *Pod, ctx context.Context, name string, field func(Spec, trace.Span) (T, error)) (T, error) {
	var zero T
	if !p.made() {
		return zero, errNotMade
	}
	ctx, span := p.startSpan(ctx, name)
	defer span.End()
	obj, err := p.get(ctx)
	if err != nil {
		endSpanError(span, err)
		return zero, err
	}
	v, err := field(Spec{ns: p.ns, name: p.name, s: obj.Spec}, span)
	if err != nil {
		endSpanError(span, err)
	}
	return v, err
}

// Spec is a pod's spec as one read found it (Pod.Spec). The zero Spec has
// no grace.
type Spec struct {
	ns, name string
	s        podSpec
}

// Grace is the spec's terminationGracePeriodSeconds, as Pod.Grace returns
// it: 1 s for 0, an error if it has no grace, a negative one or one longer
// than a time.Duration holds (292 years). The API server keeps a 0, and the
// kubelet then gives the pod 1 s ("no matter what, we always supply a
// grace period of 1", its calculateEffectiveGracePeriod): its preStop hook
// runs for 1 s at most and SIGKILL comes 2 s after SIGTERM. Refused, a
// server sized by it could not start on such a pod.
func (s Spec) Grace() (time.Duration, error) {
	switch g := s.s.TerminationGracePeriodSeconds; {
	case g != nil && *g == 0:
		return leastGrace, nil
	case g == nil || *g < 0:
		return 0, fmt.Errorf("kube: pod %s/%s: spec.terminationGracePeriodSeconds is missing or negative", s.ns, s.name)
	case *g > maxSeconds: // the API server keeps any int64 >= 0
		return 0, fmt.Errorf("kube: pod %s/%s: spec.terminationGracePeriodSeconds is %d, more than a time.Duration holds (%d s)",
			s.ns, s.name, *g, maxSeconds)
	default:
		return time.Duration(*g) * time.Second, nil
	}
}

// Priority is the spec's priority, as Pod.Priority returns it: 0 without
// one.
func (s Spec) Priority() int32 {
	if s.s.Priority == nil {
		return 0
	}
	return *s.s.Priority
}

// PreStopSleeps is each container's preStop sleep, as Pod.PreStopSleeps
// returns it: an error for a sleep that is negative or longer than a
// time.Duration holds.
func (s Spec) PreStopSleeps() (map[string]time.Duration, error) {
	stopped := s.stoppedContainers()
	sleeps := make(map[string]time.Duration, len(stopped))
	for _, c := range stopped {
		var sec int64
		if l := c.Lifecycle; l != nil && l.PreStop != nil && l.PreStop.Sleep != nil {
			sec = l.PreStop.Sleep.Seconds
		}
		if sec < 0 || sec > maxSeconds {
			return nil, fmt.Errorf("kube: pod %s/%s: container %s: lifecycle.preStop.sleep.seconds is %d: not a sleep", s.ns, s.name, c.Name, sec)
		}
		sleeps[c.Name] = time.Duration(sec) * time.Second
	}
	return sleeps, nil
}

// startSpan starts the client span of one read of the pod.
func (p *Pod) startSpan(ctx context.Context, name string) (context.Context, trace.Span) {
	return p.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("k8s.namespace.name", p.ns), attribute.String("k8s.pod.name", p.name)))
}

// endSpanError marks span failed with err, and the API server's status
// code when it answered.
func endSpanError(span trace.Span, err error) {
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		span.SetAttributes(attribute.Int("http.response.status_code", apiErr.StatusCode))
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}

// Tighten reads the pod's deletionTimestamp and passes it to b.Tighten,
// reporting whether the budget's SIGKILL moved earlier.
//
// Call it right after Budget.OnPreStop (or after OnSIGTERM when the server
// does not see the preStop hook start), with a short timeout on ctx: a
// deletion with `kubectl delete --grace-period=30`, or an eviction, gives
// the kubelet a grace period below the manifest's, and only the API server
// knows. If the read fails, the budget is unchanged and the error is
// returned (ErrNotTerminating when the pod has no deletionTimestamp, as
// under graceful node shutdown); the manifest's grace then stands, so log
// the error and go on. Read it when the termination starts: a later,
// second deletion's deletionTimestamp (the first deletion's time plus the
// new grace) is not when the kubelet kills. When the hook runs again (a
// restarted kubelet), pass Deletion's Grace to Budget.OnRestart with the
// new run's start. A drain.Config with its Pod set does all this.
func (p *Pod) Tighten(ctx context.Context, b *deadline.Budget) (bool, error) {
	if b == nil {
		return false, errors.New("kube: Tighten: budget must not be nil")
	}
	kill, err := p.DeletionTimestamp(ctx)
	if err != nil {
		return false, err
	}
	return b.Tighten(kill), nil
}

// podObject is the part of a v1.Pod that Pod needs.
type podObject struct {
	Metadata struct {
		Name                       string     `json:"name"`
		Namespace                  string     `json:"namespace"`
		UID                        string     `json:"uid"`
		DeletionTimestamp          *time.Time `json:"deletionTimestamp"`
		DeletionGracePeriodSeconds *int64     `json:"deletionGracePeriodSeconds"`
		Annotations                struct {
			// Mirror is the kubernetes.io/config.mirror annotation of a
			// static pod's mirror pod: the static pod's UID (mirrorOf).
			Mirror string `json:"kubernetes.io/config.mirror"`
		} `json:"annotations"`
	} `json:"metadata"`
	Spec podSpec `json:"spec"`
	// offset is the API server's clock less this node's, as far as the
	// response proved it (clockOffset).
	offset time.Duration
}

// podSpec is the part of a pod's spec this package reads.
type podSpec struct {
	TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds"`
	Priority                      *int32 `json:"priority"`
	HostNetwork                   bool   `json:"hostNetwork"`
	// Containers' preStop hooks are read in hooks.go.
	Containers []podContainer `json:"containers"`
	// InitContainers' too: a native sidecar's (restartPolicy Always)
	// preStop runs at the pod's termination.
	InitContainers []podContainer `json:"initContainers"`
}

// leastGrace is the least grace the kubelet gives a pod, whatever its spec
// or a deletion says ("no matter what, we always supply a grace period of
// 1", its calculateEffectiveGracePeriod): a spec's 0 is this.
const leastGrace = time.Second

// maxSeconds is the most whole seconds a time.Duration holds.
const maxSeconds = int64(math.MaxInt64 / time.Second)

func (o *podObject) deletion() (Deletion, error) {
	var d Deletion
	if g := o.Spec.TerminationGracePeriodSeconds; g != nil && *g >= 0 && *g <= maxSeconds {
		d.SpecGrace = max(time.Duration(*g)*time.Second, leastGrace) // as Spec.Grace
	}
	if o.Metadata.DeletionTimestamp == nil {
		return d, ErrNotTerminating
	}
	d.Timestamp = *o.Metadata.DeletionTimestamp
	switch s := o.Metadata.DeletionGracePeriodSeconds; {
	case s == nil || *s < 0:
	case *s == 0:
		// A force deletion that a finalizer keeps the pod through: the
		// kubelet runs it with its least grace, as a spec's 0 (SpecGrace).
		d.Grace = leastGrace
		d.Timestamp = d.Timestamp.Add(leastGrace)
	case *s > maxSeconds: // kubectl delete --grace-period takes any int64
		d.Grace = time.Duration(math.MaxInt64)
	default:
		d.Grace = time.Duration(*s) * time.Second
	}
	return d, nil
}

// get reads the pod object, and remembers its UID for events and what the
// read showed of the pod's identity (Identity).
func (p *Pod) get(ctx context.Context) (*podObject, error) {
	u := p.host + "/api/v1/namespaces/" + url.PathEscape(p.ns) + "/pods/" + url.PathEscape(p.name)
	body, offset, err := p.do(ctx, http.MethodGet, u, nil, http.StatusOK, `"get" on "pods"`)
	if err != nil {
		err = fmt.Errorf("kube: GET pod %s/%s: %w", p.ns, p.name, err)
		if IsNotFound(err) {
			p.mu.Lock()
			p.mismatched(fmt.Errorf("kube: pod %s/%s: no pod of this name, Config.UID %q: %w", p.ns, p.name, p.uid, err))
			p.mu.Unlock()
		}
		return nil, err
	}
	pod := podObject{offset: offset}
	if err := json.Unmarshal(body, &pod); err != nil {
		if cerr := ctx.Err(); cerr != nil {
			// A server (or a proxy) that gave up when the request was
			// cancelled may still complete it with an empty or cut 200 that
			// the transport hands over: the deadline is the cause.
			return nil, fmt.Errorf("kube: GET pod %s/%s: %w (the answer after it: %v)", p.ns, p.name, cerr, err)
		}
		return nil, fmt.Errorf("kube: pod %s/%s: malformed response: %w", p.ns, p.name, err)
	}
	if m := pod.Metadata; m.Name != p.name || (m.Namespace != "" && m.Namespace != p.ns) {
		return nil, fmt.Errorf("kube: pod %s/%s: response describes %q in %q, not this pod", p.ns, p.name, m.Name, m.Namespace)
	}
	uid, mirror := pod.Metadata.UID, pod.Metadata.Annotations.Mirror
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case uid == "":
	case p.uid == "" && mirror != "":
		// A mirror pod: this process runs in its static pod, whose UID
		// (the Downward API's) is the annotation, not the mirror's own.
		p.uid, p.confirmed, p.static = mirror, true, true
	case p.uid == "":
		p.uid, p.confirmed = uid, true
	case uid == p.uid || mirror == p.uid:
		p.confirmed = true
		p.static = p.static || mirror != ""
	case p.confirmed && p.static && mirror != "":
		// No deletion: the API server cannot delete a static pod, and a
		// new pod of the name is another manifest's (a new config hash).
		return nil, fmt.Errorf("kube: pod %s/%s: %w: the API server's has UID %s%s, this one is the static pod %s: another static pod of this name (its manifest replaced)",
			p.ns, p.name, ErrPodReplaced, uid, mirrorOf(mirror), p.uid)
	case p.confirmed:
		return nil, fmt.Errorf("kube: pod %s/%s: %w (deleted and created again): the API server's has UID %s%s, this one %s",
			p.ns, p.name, ErrPodReplaced, uid, mirrorOf(mirror), p.uid)
	default:
		// No read ever found this pod under the name: the name, or the UID
		// configured, may be another pod's.
		err := fmt.Errorf("kube: pod %s/%s: %w (deleted and created again), or the name or Config.UID is not this pod's: the API server's has UID %s%s, Config.UID is %s, which no read found under this name",
			p.ns, p.name, ErrPodReplaced, uid, mirrorOf(mirror), p.uid)
		p.mismatched(err)
		return nil, err
	}
	if ts := pod.Metadata.DeletionTimestamp; ts != nil {
		p.deleted = *ts // for refused: a token a minute past it is refused
	}
	return &pod, nil
}

// IsNotFound reports whether err is, or wraps, the API server's answer that
// it has no pod of this name in its namespace (an *APIError): its 404 Not
// Found whose Status names a pod (reason NotFound, details kind "pods", as
// kube-apiserver answers a GET of a pod it does not have), not a 404 that
// names none (notAPod: a proxy in front that does not know the route, the
// API server's own answer to a path it does not serve), or its 401
// Unauthorized to the pod's own service account token
// (bound to this pod's name, and UID when known, not about to expire, and
// of an audience the API server takes: made for its own, as the kubelet's
// says, or of the binding of a token an earlier answer took), which the
// API server refuses once the pod it is bound to is gone (a force
// deletion) or has another UID (a pod created again in its name), so
// that in a pod every read after a force deletion is a 401, not a 404; not
// once a read found the pod's deletionTimestamp a minute past, when the API
// server refuses the token too though the kubelet may still give the pod
// time (a second, shorter deletion; a kubelet restarted), nor for a token
// of an audience no answer showed the API server takes, which it refuses
// the same at every read (a serviceAccountToken volume's). It
// is the one test for it, the package's and its callers': Deletion,
// Identity's Mismatch and drain's reads tell by it a pod removed (a force
// deletion) or a name that is not the pod's. A request that got no answer
// (a timeout, a refused connection) is not one, nor a 401 to any other
// token.
func IsNotFound(err error) bool {
	var apiErr *APIError
	return errors.As(err, &apiErr) && (apiErr.StatusCode == http.StatusNotFound && !apiErr.podless || apiErr.gone)
}

// notAPod reports whether a 404 with Status status (nil: its body is
// none) names no pod. The API server answers a GET of a pod it does not
// have with a Status of reason NotFound whose details name the pod, kind
// "pods" (kube-apiserver v1.34.4, measured: a pod removed, one in a
// namespace that does not exist); a path it does not serve with its text
// "404 page not found" (a group it does not have, a prefix of a proxy's
// before /api: a Config.Host with a wrong path) or a Status with empty
// details (a wrong resource or version); and a proxy in front that does
// not know the route with a page of its own. None of those is the pod's
// removal, which drain takes for a force deletion and plans SIGKILL 2 s
// after SIGTERM by (row 3444). RBAC hides nothing behind a 404: it answers
// 403, for a pod that exists or not; an aggregated API not served answers
// 503.
func notAPod(status *apiStatus) bool {
	return status == nil || status.Reason != "NotFound" || status.Details.Kind != "pods"
}

// podlessNote is the Error of a 404 that names no pod (notAPod).
const podlessNote = "names no pod: not the API server's answer for a pod it does not have, but a proxy's in front that does not know the route, " +
	"or the API server's for a path it does not serve (a Config.Host with a wrong path); not the pod's removal"

// staticRead says, for ErrStaticPod's error, what a read of a static
// pod's mirror pod found: its deletionTimestamp, none, or the read's
// error (a 404: the mirror pod removed).
func staticRead(obj *podObject, err error) string {
	switch {
	case obj == nil:
		return err.Error()
	case obj.Metadata.DeletionTimestamp != nil:
		return fmt.Sprintf("its mirror pod %s has the deletionTimestamp %s, not this pod's", obj.Metadata.UID,
			obj.Metadata.DeletionTimestamp.UTC().Format(time.RFC3339))
	}
	return "its mirror pod " + obj.Metadata.UID + " has no deletionTimestamp"
}

// mirrorOf names, for an error, the static pod whose mirror pod the API
// server's is, from its kubernetes.io/config.mirror annotation: empty for
// a pod that is no mirror. A static pod's metadata.uid, which the kubelet
// gives the Downward API, is its config hash, not the UID the API server
// gave its mirror pod; the annotation carries it (the kubelet's
// CreateMirrorPod), so a mirror pod whose annotation is Config.UID is this
// pod.
func mirrorOf(hash string) string {
	if hash == "" {
		return ""
	}
	return " (a mirror pod of the static pod " + hash + ")"
}

// maxAttempts bounds how many times one call sends its request: the first
// time, and again after each answer that asks for a retry (retryAfter),
// whose wait must also end before the context's deadline.
const maxAttempts = 4

// do sends one request with the current token and returns the body of a
// response with status want, and the API server's clock less this node's
// as far as the response's Date proves it; any other status is an
// *APIError.
//
// An answer that asks to be retried later (retryAfter: 429 Too Many
// Requests, which API Priority and Fairness, max-in-flight and an API
// server shutting down answer under load, with Retry-After) is retried
// after that wait, when the wait ends before ctx's deadline and fewer than
// maxAttempts were sent; otherwise its *APIError is returned at once,
// without waiting for a retry that could not be made. So is a GET whose
// answer was lost (lostAnswer), at once.
func (p *Pod) do(ctx context.Context, method, u string, body []byte, want int, need string) ([]byte, time.Duration, error) {
	for attempt := 1; ; attempt++ {
		got, offset, wait, err := p.doOnce(ctx, method, u, body, want, need)
		if err == nil || wait <= 0 || attempt == maxAttempts {
			return got, offset, err
		}
		if dl, ok := ctx.Deadline(); ok && time.Now().Add(wait).After(dl) {
			return got, offset, err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, 0, fmt.Errorf("%w (waiting to retry after: %w)", ctx.Err(), err)
		}
	}
}

// doOnce sends the request once, as do does, and returns besides how long
// the answer asks to wait before a retry (zero: do not retry).
func (p *Pod) doOnce(ctx context.Context, method, u string, body []byte, want int, need string) ([]byte, time.Duration, time.Duration, error) {
	token, err := readToken(p.token)
	if err != nil {
		return nil, 0, 0, err
	}
	client := p.client
	if client == nil {
		pool, err := loadCA(p.ca)
		if err != nil {
			return nil, 0, 0, err
		}
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
		defer tr.CloseIdleConnections()
		client = &http.Client{Transport: tr, CheckRedirect: noRedirect}
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	var trace sendTrace
	req, err := http.NewRequestWithContext(trace.on(ctx), method, u, rd)
	if err != nil {
		return nil, 0, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	sent := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return nil, 0, lostAnswer(ctx, method, err, trace.unanswered()), err
	}
	answered := time.Now()
	offset := clockOffset(resp.Header.Get("Date"), sent, answered)
	defer resp.Body.Close()
	got, err := io.ReadAll(io.LimitReader(resp.Body, maxPodBytes))
	var wait time.Duration
	switch {
	case err != nil:
		wait = lostAnswer(ctx, method, err, true) // its body cut
	case resp.StatusCode == want: // a success (want is a 2xx)
		p.accepted(token)
	default:
		status := parseStatus(got) // once: the error's, and a 403's or 404's says the token was taken
		if authenticated(resp.StatusCode, status) {
			p.accepted(token)
		}
		e := apiError(resp.StatusCode, got, status, need)
		if resp.StatusCode == http.StatusUnauthorized {
			e.refused, e.gone = p.refused(token, time.Now(), offset)
		}
		err, wait = e, retryAfter(resp, method, answered)
	}
	if err != nil && ctx.Err() != nil {
		// The context ended while the answer came in. The transport may
		// still hand over a response that the server cut short when the
		// connection closed; the context is the cause, so report it.
		return nil, 0, 0, fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return got, offset, wait, err
}

// lostAnswer is how long to wait before a request that failed with err is
// sent again: at once (a millisecond) for a GET whose answer was lost,
// zero for anything else. A GET changes nothing, and each request has a
// connection of its own (or Config.Client's next one), so the loss says
// nothing of the next; client-go sends these GETs again too.
//
// An answer is lost when the request was written whole and the transport
// failed before any byte of the answer came or while its body came (taken:
// the request's httptrace says so, sendTrace), whatever error it made of
// that, or when the connection was reset or closed (ECONNRESET, EOF): an
// API server instance going away behind the Service, a load balancer's
// reset. On HTTP/2 a connection that ends after a GOAWAY naming the GET
// among the streams the server took is such a loss, which Go's transport
// does not send again itself (it does a stream past the GOAWAY's last).
// Only the trace tells it on every transport: net/http's bundled HTTP/2
// returns an error type it does not export, with no As method (Go issue
// 74578), and golang.org/x/net/http2, a dependency of this module, exports
// its GoAwayError only from its own Transport, where Config.Client's
// transport is the caller's (this package's own client speaks HTTP/1).
//
// Not a refused connection (no API server there now: nothing was
// written), not the server's TLS alert (a client certificate refused:
// tlsAlert), not a timeout (the API server may only be slow, and
// Config.Client's own bound would be waited out again), not a POST (an
// Event the API server may have created), not ctx's end.
func lostAnswer(ctx context.Context, method string, err error, taken bool) time.Duration {
	if method != http.MethodGet || ctx.Err() != nil {
		return 0
	}
	var timeout net.Error
	if errors.As(err, &timeout) && timeout.Timeout() {
		return 0
	}
	if tlsAlert(err) {
		return 0
	}
	if taken || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return time.Millisecond
	}
	return 0
}

// tlsAlert reports whether err is an alert the server sent on the
// connection's TLS: its answer, not one lost. On TLS 1.3 the client's
// handshake ends before the server has verified the client's certificate,
// so the request is written whole before the alert that refuses the
// certificate comes, and every resend would get the same. crypto/tls
// gives a received alert as a *net.OpError of Op "remote error" over its
// unexported alert type (tls.AlertError is QUIC's alone).
func tlsAlert(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "remote error"
}

// sendTrace follows one request through its httptrace: whether the
// transport's last attempt wrote it whole to a connection, and whether a
// byte of its answer came.
// The transport calls the hooks from its own goroutines, which may still
// run when Do returns after ctx ended.
type sendTrace struct {
	written, answered atomic.Bool
}

// on returns ctx with the trace's hooks added to any ctx has.
func (s *sendTrace) on(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		// Each of the transport's attempts gets a connection first: one it
		// sends again itself (a GET written on a kept-alive connection that
		// closed unanswered) is written, or not, anew.
		GetConn: func(string) { s.written.Store(false) },
		WroteRequest: func(w httptrace.WroteRequestInfo) {
			if w.Err == nil {
				s.written.Store(true)
			}
		},
		GotFirstResponseByte: func() { s.answered.Store(true) },
	})
}

// unanswered reports whether the request was written whole and no byte of
// its answer came: the server took it, and a failure now lost its answer.
func (s *sendTrace) unanswered() bool { return s.written.Load() && !s.answered.Load() }

// authenticated reports whether an answer of the API server with status
// code and Status body status (nil: none) shows that it took the request's
// token: a success, or the Status of a refusal made once it knew the user
// (RBAC's or admission's 403, a 404). Not a 429 or 5xx, which an API
// server shutting down (its WithWaitGroup), its request timeout or a proxy
// in front of it answer before any authentication.
func authenticated(code int, status *apiStatus) bool {
	if code >= 200 && code < 300 {
		return true
	}
	return (code == http.StatusForbidden || code == http.StatusNotFound) && status != nil
}

// noRedirect is the CheckRedirect of every client a Pod sends with, its
// own and Config.Client's copy: net/http would send the token on to a
// redirect's http:// URL of the same host, in clear, and the API server
// answers these requests without one. A 3xx is an *APIError.
func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// retryAfter is how long resp asks the client to wait before it sends its
// request again, or zero when it is not to be sent again: a 429 Too Many
// Requests (nothing was done) after its Retry-After, 1 s without one, as
// client-go; a 5xx to a GET (which changes nothing) only with a
// Retry-After. Retry-After is whole seconds or an HTTP date, which is a
// time of the clock of the server that sent it: the wait is that date less
// the answer's Date, the server's now when it answered (at answered, this
// node's clock), less the time since; with no Date, less this node's now.
func retryAfter(resp *http.Response, method string, answered time.Time) time.Duration {
	h := resp.Header.Get("Retry-After")
	var wait time.Duration
	if secs, err := strconv.ParseInt(strings.TrimSpace(h), 10, 32); err == nil && secs >= 0 {
		wait = time.Duration(secs) * time.Second
	} else if at, err := http.ParseTime(h); err == nil {
		wait = time.Until(at)
		if date, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
			wait = at.Sub(date) - time.Since(answered)
		}
		wait = max(wait, 0)
	} else {
		h = ""
	}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests && h == "":
		return time.Second
	case resp.StatusCode == http.StatusTooManyRequests,
		resp.StatusCode >= 500 && method == http.MethodGet && h != "":
		return max(wait, time.Millisecond) // Retry-After: 0 is a retry at once
	}
	return 0
}

// clockOffset is how far the clock of the server that sent date (an HTTP
// Date header) is ahead of this node's, for a request sent at sent and
// answered at got (this node's clock): the offset nearest zero among those
// the header allows, zero when it allows zero or there is no valid date.
//
// The server's clock read date, or up to a second more (the header keeps
// whole seconds), at some moment between sent and got: the offset is in
// (date - got, date + 1s - sent). Taking the bound nearest zero corrects
// no more than is proved: never by a second that the header's precision
// or the round trip could explain.
func clockOffset(date string, sent, got time.Time) time.Duration {
	d, err := http.ParseTime(date)
	if date == "" || err != nil {
		return 0
	}
	sent, got = sent.Round(0), got.Round(0) // wall clocks: the server's is one
	switch lo, hi := d.Sub(got), d.Add(time.Second).Sub(sent); {
	case lo > 0:
		return lo
	case hi < 0:
		return hi
	}
	return 0
}

// apiError is the *APIError of an answer with status code and body, whose
// Status is status (parseStatus; nil: the body is none), to a request that
// needed the RBAC rule need.
//
// A 403 is the API server's authorization (RBAC) only when its Status says
// so: the authorizer's message is always `... is forbidden: User "name"
// cannot ...` (k8s.io/apiserver's ForbiddenStatusError). Its admission
// answers 403 too, for a request that no RBAC rule would let through: the
// NamespaceLifecycle plugin to every create in a namespace being deleted
// (a cause NamespaceTerminating), which is how `kubectl delete namespace`
// ends its pods, and ResourceQuota to one past a quota.
func apiError(code int, body []byte, status *apiStatus, need string) *APIError {
	e := &APIError{StatusCode: code, Need: need, podless: code == http.StatusNotFound && notAPod(status)}
	if status != nil {
		e.Reason, e.Message = status.Reason, status.Message
		if code == http.StatusForbidden && !strings.Contains(status.Message, `forbidden: User "`) {
			e.refused = "refused by the API server's admission, not by RBAC"
			for _, c := range status.Details.Causes {
				if c.Reason == "NamespaceTerminating" {
					e.refused = "the namespace is being deleted: the API server creates nothing more in it, Events included; not RBAC"
				}
			}
		}
		return e
	}
	const maxMessage = 256
	e.Message = strings.TrimSpace(string(body[:min(len(body), maxMessage)]))
	return e
}

// apiStatus is the part of a metav1.Status body an APIError and
// authenticated read.
type apiStatus struct {
	Kind    string `json:"kind"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
	Details struct {
		Name   string `json:"name"`
		Kind   string `json:"kind"`
		Causes []struct {
			Reason string `json:"reason"`
		} `json:"causes"`
	} `json:"details"`
}

// parseStatus is body's metav1.Status, or nil when body is none (not
// JSON, or of another kind: a proxy's page, a pod).
func parseStatus(body []byte) *apiStatus {
	var status apiStatus
	if json.Unmarshal(body, &status) != nil || status.Kind != "Status" {
		return nil
	}
	return &status
}

func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	return token, nil
}

func loadCA(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", path)
	}
	return pool, nil
}
