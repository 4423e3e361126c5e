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
// address and the reason; the secret a request carried is never logged.
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
func (g *HookGuard) Wrap(next http.Handler) http.Handler {
	header := g.Header
	if header == "" {
		header = defaultHookHeader
	}
	log := g.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := g.allow(r, header); err != nil {
			log.Warn("drain: preStop request refused", "remote", r.RemoteAddr, "method", r.Method,
				"path", r.URL.Path, "reason", err.Error())
			http.Error(w, "forbidden: "+err.Error(), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
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
	if g.Check != nil {
		return g.Check(r)
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
// mistake loses sandboxes. The read is bounded by timeout.
//
// Do not use it where a pod drains without being deleted: under the
// kubelet's graceful node shutdown the preStop hook runs with no
// deletionTimestamp.
func RequireTerminating(pod kube.DeletionReader, timeout time.Duration) func(*http.Request) error {
	return func(r *http.Request) error {
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		_, err := pod.DeletionTimestamp(ctx)
		if errors.Is(err, kube.ErrNotTerminating) {
			return errors.New("the pod is not terminating (no deletionTimestamp)")
		}
		return nil
	}
}
