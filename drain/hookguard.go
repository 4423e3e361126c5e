package drain

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/drainkit/drainkit/kube"
)

// defaultHookHeader is the request header that carries a HookGuard's secret
// when HookGuard.Header is empty.
const defaultHookHeader = "X-Drain-Secret"

// A HookGuard decides who may start a drain. One preStop call closes the
// admission gate and turns readiness off, taking the node out of service:
// on a sandbox node, where untrusted code runs, only the kubelet's hook (and
// the operator) may make it. Serve the guarded hook on a listener of its own
// (loopback, or the pod's own address) and give the kubelet the secret in
// the hook's httpHeaders.
//
// Every refused request is answered 403 and logged at Warn with the peer's
// address and the reason, at most one line a second for each reason: the
// refusals within a second of a line are counted and logged together a
// second after it, with the last one's address, so that a flood from the
// pod network costs the node's logs a line a second, and a refusal of
// another reason (the kubelet's own call, its secret missing) still shows
// at once. The secret a request carried is never logged.
// The zero HookGuard lets through only the requests of a loopback peer.
type HookGuard struct {
	// Secret is the shared secret a request must carry in Header. Empty
	// means none: only requests from a loopback peer are let through.
	// White space at either end (the newline a Secret's file often ends
	// in) is not part of it: an HTTP header value cannot carry it, so no
	// hook could send it. A Secret of white space alone lets nothing
	// through.
	Secret string
	// Header is the header carrying the secret; empty means
	// "X-Drain-Secret". The manifest's preStop httpGet sends it with
	// httpHeaders.
	Header string
	// Check, if set, is a further condition, called after the secret
	// matched; a request it returns an error for is refused with that
	// reason. RequireTerminating makes one.
	Check func(*http.Request) error
	// Logger receives the refusals; nil discards them.
	Logger *slog.Logger
}

// Wrap returns next guarded: a request passes when it carries the secret
// (compared in constant time) or, with no Secret configured, comes from a
// loopback address; and Check, if set, lets it. Anything else gets 403.
// A Drainer's PreStop handler behind it takes T0 from when the request
// arrived, not from when Check let it through: the kubelet's grace runs
// from its call, however long Check held it.
func (g *HookGuard) Wrap(next http.Handler) http.Handler {
	header := g.Header
	if header == "" {
		header = defaultHookHeader
	}
	log := g.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	refusals := &refusalLog{log: log}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived := time.Now()
		if err := g.allow(r, header); err != nil {
			refusals.refused(r, err.Error())
			http.Error(w, "forbidden: "+err.Error(), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), arrivalKey{}, arrived)))
	})
}

// arrivalKey is the context key under which Wrap passes on when a request
// it let through arrived: the kubelet's grace runs from its call of the
// hook, and Check (RequireTerminating's read of the pod, up to its
// timeout against an API server that does not answer) may hold the call
// before the hook sees it, which would put T0, and SIGKILL, that much late.
type arrivalKey struct{}

// arrival is when r arrived at a HookGuard that let it through, or now
// when none did.
func arrival(r *http.Request, now time.Time) time.Time {
	if at, ok := r.Context().Value(arrivalKey{}).(time.Time); ok && at.Before(now) {
		return at
	}
	return now
}

// refusalEvery is the most often a HookGuard logs a refusal of one reason.
const refusalEvery = time.Second

// maxRefusalReasons bounds the reasons a refusalLog keeps apart (a Check's
// reasons may carry error text); the rest share one account.
const maxRefusalReasons = 16

// A refusalLog logs a HookGuard's refusals, for each reason at most one
// line every refusalEvery: the ones that come sooner are counted, and a
// timer logs them together when the time is up. A reason not seen in the
// last second is logged at once.
type refusalLog struct {
	log *slog.Logger

	mu      sync.Mutex
	reasons map[string]*refusals
}

// refusals is the account of one reason's refusals.
type refusals struct {
	last   time.Time // when a line was last logged
	held   int       // refusals since then, not yet logged
	sample []any     // the last of them, as log attributes
}

func (l *refusalLog) refused(r *http.Request, reason string) {
	attrs := []any{"remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path, "reason", reason}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.reasons == nil {
		l.reasons = make(map[string]*refusals)
	}
	key := reason
	if _, ok := l.reasons[key]; !ok && len(l.reasons) >= maxRefusalReasons {
		key = ""
	}
	a := l.reasons[key]
	if a == nil {
		a = new(refusals)
		l.reasons[key] = a
	}
	if a.last.IsZero() || now.Sub(a.last) >= refusalEvery {
		a.last = now
		l.log.Warn("drain: preStop request refused", attrs...)
		return
	}
	a.held++
	a.sample = attrs
	if a.held == 1 {
		time.AfterFunc(a.last.Add(refusalEvery).Sub(now), func() { l.flush(a) })
	}
}

// flush logs the refusals a held since its last line.
func (l *refusalLog) flush(a *refusals) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a.last = time.Now()
	l.log.Warn("drain: preStop requests refused", "refused", a.held, "within", refusalEvery, slog.Group("last", a.sample...))
	a.held, a.sample = 0, nil
}

func (g *HookGuard) allow(r *http.Request, header string) error {
	if g.Secret == "" {
		if !loopbackPeer(r) {
			return errors.New("no secret configured, and the request is not from loopback")
		}
	} else {
		secret := strings.TrimSpace(g.Secret)
		if secret == "" {
			return errors.New("the configured secret is white space alone: nothing can match it")
		}
		got := r.Header.Get(header)
		if got == "" {
			return fmt.Errorf("no %s header", header)
		}
		if subtle.ConstantTimeCompare([]byte(got), []byte(secret)) != 1 {
			return fmt.Errorf("wrong %s", header)
		}
	}
	if g.Check != nil { // its error is read below, outside any recover but net/http's
		return readableErr(g.Check(r), "HookGuard.Check", "the call is refused")
	}
	return nil
}

func loopbackPeer(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// RequireTerminating returns a HookGuard Check that reads the pod's own
// object with pod (its service account must be allowed to get it) and
// refuses a drain while the pod has no deletionTimestamp: a pod that is not
// being deleted has no reason to drain. A read that fails for another
// reason (the API server unreachable, no permission) lets the request
// through: the secret already vouched for it, and a drain refused by
// mistake loses sandboxes. The read is bounded by timeout, and holds the
// hook's call that long at most; T0 stays the call's arrival (Wrap). A nil
// pod, or a timeout that is not positive, panics here, when the guard is
// built: a read with no time fails, and a failed read lets every request
// through, so that check would refuse nothing.
//
// Do not use it where a pod drains without being deleted: under the
// kubelet's graceful node shutdown the preStop hook runs with no
// deletionTimestamp, and a static pod never has one (kube.ErrStaticPod:
// the kubelet stops it when its manifest is removed, and its mirror pod's
// deletion is not its), so the check refuses every drain of one.
func RequireTerminating(pod kube.DeletionReader, timeout time.Duration) func(*http.Request) error {
	switch {
	case pod == nil:
		panic("drain: RequireTerminating: nil DeletionReader (a *kube.Pod from kube.New)")
	case timeout <= 0:
		panic("drain: RequireTerminating: timeout must be positive, got " + timeout.String() +
			": a read with no time fails, and a failed read lets every request through")
	}
	return func(r *http.Request) error {
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		_, err := pod.DeletionTimestamp(ctx)
		err = readableErr(err, "the DeletionReader", "a failed read") // errors.Is walks its Unwrap
		if errors.Is(err, kube.ErrNotTerminating) {
			return errors.New("the pod is not terminating (no deletionTimestamp)")
		}
		return nil
	}
}
