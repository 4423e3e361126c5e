package drain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/gracefit"
	"github.com/drainkit/drainkit/internal/hupquit"
	"github.com/drainkit/drainkit/internal/listenaddr"
	"github.com/drainkit/drainkit/internal/prestopsleep"
	"github.com/drainkit/drainkit/internal/usererr"
	"github.com/drainkit/drainkit/pause"
)

// The environment a Server reads, set in the pod's manifest; all but the
// hook's two are ConfigFromEnv's too.
const (
	// EnvGrace is the pod's terminationGracePeriodSeconds, as whole seconds
	// ("3600") or a Go duration ("1h"). The Downward API does not expose
	// the spec's value, so either the manifest states it once and copies it
	// here (a kustomize replacement, or a test that keeps the two equal),
	// or, unset, NewServer (ConfigFromEnv) reads it from the pod's spec
	// through the API server (EnvPodName and RBAC "get" on "pods"). Set
	// with that access too, it is checked against the spec at start: the
	// spec's is taken when they differ, with an error in the log naming
	// both, and the variable stands in when the spec cannot be read. A
	// static pod sets it: the kubelet may start one before it made its
	// mirror pod in the API server (at the node's boot), through which its
	// spec is read; unset, a 404 for a POD_UID that is a static pod's is
	// read again every second for 5 s, and then NewServer fails, naming it.
	EnvGrace = "DRAINKIT_GRACE"
	// EnvHookListen is the address the preStop hook is served on; unset,
	// it is 127.0.0.1:8082: loopback, reachable by an exec hook
	// (drain/cmd/drainhook) but not by the sandboxes on the node. Set it to the pod's own address ([$(POD_IP)]:8082) for an
	// httpGet hook, together with EnvHookSecret.
	EnvHookListen = "DRAINKIT_HOOK_LISTEN"
	// EnvHookSecret is the shared secret the hook's httpHeaders carry in
	// the header X-Drain-Secret. Required when EnvHookListen is not
	// loopback. The manifests' placeholder ("replace-me-...", "the same
	// secret") is refused: it is public. White space at either end (a
	// Secret file's last newline) is not part of it.
	EnvHookSecret = "DRAINKIT_HOOK_SECRET"
	// EnvPodName is the pod's name, from the Downward API (fieldRef
	// metadata.name). With it and the pod's mounted service account the
	// Server reads the pod's deletionTimestamp and posts Events on the pod
	// (Config.Pod, which needs RBAC: see package kube); without either, it
	// logs why and drains on the grace of EnvGrace.
	EnvPodName = "POD_NAME"
	// EnvPodUID is the pod's UID, from the Downward API (fieldRef
	// metadata.uid): kube.Config.UID. With it the Server never takes
	// another pod of its name for its own (after kubectl delete --force a
	// StatefulSet's new pod has it): that pod's deletion and Events are
	// not this one's (kube.ErrPodReplaced). Unset, the UID is the one the
	// first read of the pod finds: the one at start, of the spec's grace
	// (see EnvGrace), when it succeeds, else one at the drain, when a new
	// pod of the name may already exist.
	EnvPodUID = "POD_UID"
	// EnvKubeletGrace is Config.KubeletGrace: the grace the kubelet gives
	// the pod when it terminates it on its own (graceful node shutdown's
	// slice, evictionMaxPodGracePeriod), as whole seconds or a Go
	// duration. It needs EnvPodName and API access; without them it is
	// ignored, with a warning. Unset: not known.
	EnvKubeletGrace = "DRAINKIT_KUBELET_GRACE"
	// EnvKubeletConfig is the path, in the container, of the node's
	// KubeletConfiguration (the kubelet's --config file, mounted read-only
	// from the host): Config.KubeletGrace is then what that file gives
	// this pod, graceful node shutdown's slice for the pod's priority (read
	// through the API server) or a soft eviction's
	// evictionMaxPodGracePeriod, the smaller, as the kubelet computes them
	// (the least of any priority when the priority cannot be read). No
	// number in the manifest drifts from the node's configuration. It
	// needs EnvPodName and API access, as EnvKubeletGrace does, and is
	// refused beside it; a file that cannot be read is an error at start.
	EnvKubeletConfig = "DRAINKIT_KUBELET_CONFIG"
	// EnvPreserveEstimate is the time one preserve takes on this node, as
	// whole seconds or a Go duration ("500ms"): the start of the
	// Estimator (Config.Pause.Estimator), which learns from every preserve
	// measured. The plan reserves the preserve phase's time from it until
	// then (and from a sandbox's own estimate, pause.Estimated), and that
	// reserve is what ends the preStop wait: set too low, the wait leaves
	// the preserves too little time. Unset: 1 s.
	EnvPreserveEstimate = "DRAINKIT_PRESERVE_ESTIMATE"
	// EnvSandboxTimeout is Config.Pause.SandboxTimeout, as whole seconds
	// or a Go duration: a preserve still running this long after its
	// first attempt is given up (timed_out), and one that ignores its
	// context is abandoned a second later, its slot given to the next
	// sandbox. Unset: no bound of its own, only the phase's deadlines.
	// Below EnvPreserveEstimate NewServer (ConfigFromEnv) warns, naming both: a preserve
	// that takes the estimate would be given up before it ends.
	EnvSandboxTimeout = "DRAINKIT_SANDBOX_TIMEOUT"
	// EnvMargin is the budget's margin (deadline.Config.Margin), as whole
	// seconds or a Go duration: how long before the expected SIGKILL the
	// drain's work must be over, for the process's own exit (flushing
	// logs, closing files) and a SIGKILL that comes early. Unset: a tenth
	// of the grace, at least 1.5 s and at most 5 s. It must be shorter
	// than the grace.
	EnvMargin = "DRAINKIT_MARGIN"
	// EnvPreStopSleep is the server's container's preStop sleep hook
	// (lifecycle.preStop.sleep.seconds), as whole seconds or a Go
	// duration; "0" declares none (deadline.Config.PreStopSleep). The
	// kubelet sleeps before its SIGTERM, out of the grace, and calls no
	// server: unset and unread, the budget would take SIGTERM for T0 and
	// plan SIGKILL the sleep too late. With EnvPodName the pod's spec is
	// read, and this process's container's sleep taken (the variable, when
	// set, must equal it): the pod's only container, or the one whose
	// directory of the kubelet (pods/UID/containers/NAME, where its
	// termination message file is) this process has mounted. When that
	// cannot tell, the variable decides, and unset the longest sleep of the
	// pod's containers is planned with, early and never late (logged).
	EnvPreStopSleep = "DRAINKIT_PRESTOP_SLEEP"
)

// defaultHookListen is where a Server serves the preStop hook when
// EnvHookListen is unset.
const defaultHookListen = "127.0.0.1:8082"

// A Server is the one-call wiring of a net/http sandbox server: the
// budget from the pod's grace period, the admission gate, readiness, the
// guarded preStop hook on a listener of its own, the Drainer with its
// default Preserver, the HTTP server's shutdown as the last step, and the
// signals. For full control build a Drainer with New instead.
//
//	s, err := drain.NewServer(srv, pause.ListFunc(running)) // grace from DRAINKIT_GRACE
//	mux.Handle("POST /sandboxes", s.Admit(create))          // 503 + Retry-After once draining
//	os.Exit(s.Run(ctx))                                     // serves until SIGTERM, drains, exits
//
// A Server not made by NewServer (the zero value, or a nil *Server)
// serves and drains nothing and says so: Run logs "drain: Server not made
// by drain.NewServer" at Error through slog.Default and returns 2 at once,
// Admit's handler answers 500 saying the same, and Drainer is nil.
type Server struct {
	srv    *http.Server
	d      *Drainer
	hook   string
	secret string
	log    *slog.Logger
	ready  *http.ServeMux // srv.Handler as NewServer (or Run) wrapped it: GET /readyz in front
	// misdirected is set once the log said that the kubelet's preStop
	// hook missed the drain (misdirectedHook, notTheHook): once is enough.
	misdirected atomic.Bool

	// listening receives the two listeners' addresses once Run serves:
	// srv's, then the hook's (for tests that listen on port 0).
	listening chan [2]net.Addr
	// running is set while Run runs and stays set once it served: Run
	// serves and drains once.
	running atomic.Bool
	// caught is when NewServer began catching SIGTERM (preRun): the
	// earliest a SIGTERM found waiting when Run serves can have come; look
	// is preRun's look at that moment; released is set once the Server no
	// longer needs preRun.
	caught   time.Time
	look     uint64
	released atomic.Bool
}

// preRun catches SIGTERM for the Servers NewServer made whose Run has not
// begun: the reads NewServer makes may take seconds (the pod's spec, a
// static pod's mirror pod), and so may the rest of the server's start,
// and with its default action a SIGTERM meanwhile ended the process at
// once (status 143): no drain, no Report, no line in the log. Run takes a
// SIGTERM waiting there for its own. The channel is made here, not by
// NewServer: one made in a testing/synctest bubble (a test of a server's
// start in virtual time) may not be given to os/signal, whose goroutine
// is outside it.
var preRun struct {
	sync.Mutex
	servers int            // made by NewServer, Run not yet begun
	c       chan os.Signal // registered while servers > 0
	// looks counts the looks into c (every NewServer's, every Run's);
	// term is the last one that found a SIGTERM there. A SIGTERM found
	// by look n came after look n-1: it is for the Servers made at a
	// look before n, not for one made at n or after (a process with
	// several Servers: a test's).
	looks, term uint64
}

func init() {
	preRun.c = make(chan os.Signal, 1)
	// os/signal starts its goroutines at the first registration: started
	// by NewServer's in a bubble, they would belong to it, and the bubble
	// would never end. Started here, outside any, by a signal whose
	// default action is to be ignored, given it back at once.
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, ignoredByDefault)
	signal.Stop(winch)
}

// lookLocked looks into preRun.c once and returns the look's number.
func lookLocked() uint64 {
	preRun.looks++
	select {
	case <-preRun.c:
		preRun.term = preRun.looks
	default:
	}
	return preRun.looks
}

// catchTerm has preRun catch SIGTERM for one more Server, and returns the
// look that began it (Server.look).
func catchTerm() uint64 {
	preRun.Lock()
	defer preRun.Unlock()
	if preRun.servers == 0 {
		signal.Notify(preRun.c, syscall.SIGTERM)
	}
	preRun.servers++
	return lookLocked()
}

// releaseTerm is catchTerm undone for s, once: the last Server's release
// gives SIGTERM its default action again, where no channel of Run's has it.
func (s *Server) releaseTerm() {
	if !s.released.CompareAndSwap(false, true) {
		return
	}
	preRun.Lock()
	defer preRun.Unlock()
	if preRun.servers--; preRun.servers == 0 {
		signal.Stop(preRun.c)
	}
}

// NewServer wires srv, whose sandboxes lists lists, for termination. steps
// run after preservation and before srv's shutdown, which is always the
// last step (a device teardown such as a *ublk.Teardown goes here). It
// reads EnvGrace (or, unset, the pod's spec through the API server when
// EnvPodName is set), EnvPodName, EnvPodUID, EnvKubeletGrace,
// EnvKubeletConfig, EnvHookListen, EnvHookSecret, EnvPreserveEstimate,
// EnvSandboxTimeout, EnvMargin and EnvPreStopSleep (see ConfigFromEnv), and wraps
// srv.Handler to answer GET /readyz (503 once draining); Run wraps it again
// when srv.Handler was set after NewServer. A GET /readyz of srv's own, on
// an *http.ServeMux (http.DefaultServeMux when srv.Handler is nil), answers
// until the drain begins: a runtime not ready still says so. Behind another
// Handler the wrapper cannot see one, and answers 200 "ok" itself. With the
// pod's spec read, it says once what the container's preStop hook will do
// to the drain: at Error an httpGet that never reaches GET /drain on
// EnvHookListen (which the kubelet would not say: it takes any answer for
// the hook's end), at Warn an exec hook that calls neither drainhook nor
// GET /drain, each with what to change; and at Error a postStart hook
// that calls GET /drain, which would start the drain as the container
// starts. Errors name the
// variable or argument that is wrong; they come now, not at SIGTERM.
// From its call SIGTERM is caught for Run (see Run); after an error it has
// its default action again, unless another Server made waits for its Run.
func NewServer(srv *http.Server, sandboxes pause.Lister, steps ...Step) (_ *Server, err error) {
	if srv == nil {
		return nil, errors.New("drain: NewServer: srv must not be nil")
	}
	// Named as the caller wrote them: New would name Config fields the
	// caller never saw.
	if sandboxes == nil || usererr.IsNil(sandboxes) {
		return nil, errors.New("drain: NewServer: sandboxes must not be nil: it lists the running sandboxes the drain preserves")
	}
	for i, st := range steps {
		if st == nil || usererr.IsNil(st) {
			return nil, fmt.Errorf("drain: NewServer: steps[%d] is nil", i)
		}
	}
	if srv.Addr != "" { // empty: ":http", as ListenAndServe (listenAddr)
		if err := listenaddr.Check(srv.Addr); err != nil {
			return nil, fmt.Errorf("drain: NewServer: srv.Addr %q %w", srv.Addr, err)
		}
	}
	s := &Server{srv: srv, hook: os.Getenv(EnvHookListen), secret: os.Getenv(EnvHookSecret),
		log: slog.Default(), listening: make(chan [2]net.Addr, 1), caught: time.Now()}
	s.look = catchTerm() // SIGTERM from now on, not from Run's call (preRun)
	defer func() {
		if err != nil { // no Server to Run
			s.releaseTerm()
		}
	}()
	if s.hook == "" {
		s.hook = defaultHookListen
	}
	if err := s.checkHook(); err != nil {
		return nil, err
	}
	if addr := listenAddr(srv); listenaddr.SamePort(addr, s.hook) { // Run's second listener would fail as if another process held the port
		return nil, fmt.Errorf("drain: NewServer: srv.Addr %q and %s=%q take the same port: give the preStop hook a port of its own",
			addr, EnvHookListen, s.hook)
	}
	cfg, spec, err := configFromEnv()
	if err != nil {
		return nil, err
	}
	sayPreStop(cfg.Logger, spec, hookSite{hook: s.hook, srv: listenAddr(srv), secret: s.secret, local: localIP})
	budget, pod, grace := cfg.Budget, cfg.Pod, cfg.Budget.Grace()
	// The HTTP step reserves a fortieth of the grace the kubelet uses,
	// between 250 ms and 5 s, evaluated whenever the plan reads it: the
	// grace, or SIGKILL - T0 once the pod's deletionTimestamp (kubectl
	// delete --grace-period, an eviction) or EnvKubeletGrace put SIGKILL
	// earlier. Sized from the grace alone, a 30 s deletion of an hour's pod
	// kept the hour's 5 s of the 25 s left, and the preserve phase, sharing
	// with it, lost up to a sixth of its time.
	httpReserve := func() time.Duration { return httpShare(budget) }
	all := append(append([]Step(nil), steps...), httpStep(httpStepName, srv, httpReserve)) // HTTPServerStep's, with a live reserve
	// Pause, Checkpoint and Delete take work off the node; a Stream
	// follows a sandbox that is still on it, and ends once it is
	// preserved; a KeepAlive keeps one running here, where it is
	// preserved, rather than ended by the server's own timeout during a
	// preStop wait that may last the whole grace.
	gate := &Gate{Exempt: []Class{Pause, Checkpoint, Delete, Stream, KeepAlive}}
	cfg.Sandboxes, cfg.Steps, cfg.Gate, cfg.phasesAt = sandboxes, all, gate, withHTTPShare
	if s.d, err = New(cfg); err != nil {
		var short shortfallError
		if errors.As(err, &short) { // the grace, not a Config field the caller never saw
			// The variable only when it is the grace planned with: the
			// pod's spec, read, wins over one that disagrees, and raising
			// the variable would change nothing.
			src := fmt.Sprintf("the pod's spec.terminationGracePeriodSeconds (%v)", grace)
			if grace == time.Second { // kube.Spec.Grace
				src = "the pod's spec.terminationGracePeriodSeconds (1s, which the kubelet gives a 0 too)"
			}
			if v := os.Getenv(EnvGrace); v != "" {
				if env, err := durationEnv(EnvGrace); err == nil && env == grace || pod == nil {
					src = fmt.Sprintf("%s=%s (%v)", EnvGrace, v, grace)
				} else {
					src = fmt.Sprintf("the pod's spec.terminationGracePeriodSeconds (%v, which the kubelet uses; %s=%s is not it)", grace, EnvGrace, v)
				}
			}
			short.least = smallestGrace(budget, short.phases)
			return nil, fmt.Errorf("drain: %s is too short for one round of preserves and the steps' reserves: %s", src, short.detail(false))
		}
		return nil, err
	}
	s.wrapHandler()
	return s, nil
}

// httpStepName is the phase of NewServer's http step.
const httpStepName = "http"

// httpShare is the reserve of NewServer's http step over budget: a
// fortieth of the grace the kubelet uses, between 250 ms and 5 s.
func httpShare(budget *deadline.Budget) time.Duration {
	return min(max(budget.GraceInUse()/40, 250*time.Millisecond), 5*time.Second)
}

// smallestGrace is the smallest whole grace that fits phases, the plan New
// refused over budget, with budget's margin and preStop sleep
// (gracefit.Smallest, drainkit plan's rule), the http step's reserve
// following each grace tried as it follows the budget's; 0 if none up to
// gracefit.Max. The margin is EnvMargin's, which ConfigFromEnv has read
// and checked.
func smallestGrace(budget *deadline.Budget, phases []deadline.Phase) time.Duration {
	margin, _ := optionalDurationEnv(EnvMargin)
	c := deadline.Config{Margin: margin, PreStopSleep: prestopsleep.Of(budget)}
	return gracefit.Smallest(c, func(b *deadline.Budget) []deadline.Phase { return withHTTPShare(b, phases) })
}

// withHTTPShare is phases with the http step's reserve following budget's
// grace in use (httpShare), where it follows the Drainer's: the work laid
// out in another budget (a grace tried for the refusal, the kubelet's own
// grace New warns of) counts the reserve the step would have there.
func withHTTPShare(budget *deadline.Budget, phases []deadline.Phase) []deadline.Phase {
	at := slices.Clone(phases)
	for i, ph := range at {
		if ph.Name == httpStepName {
			at[i].Reserve = func() time.Duration { return httpShare(budget) }
		}
	}
	return at
}

// wrapHandler serves GET /readyz in front of srv.Handler, unless srv's
// handler is already that wrapper, and reports whether it wrapped.
func (s *Server) wrapHandler() bool {
	if h, ok := s.srv.Handler.(*http.ServeMux); ok && h == s.ready {
		return false
	}
	next := s.srv.Handler
	if next == nil {
		next = http.DefaultServeMux
	}
	s.ready = http.NewServeMux()
	s.ready.Handle("GET /readyz", s.d.Gate().Readiness(ownReadiness(next)))
	s.ready.Handle("GET "+hookPath, s.misdirectedHook(next))
	s.ready.Handle("/", next)
	s.srv.Handler = s.ready
	return true
}

// hookPath is where the preStop hook is served, on EnvHookListen.
const hookPath = "/drain"

// misdirectedHook is next, srv's handler, for GET /drain on srv's own
// address, which says at Error, once, when the kubelet's httpGet hook
// (its User-Agent, kube-lifecycle/VERSION) comes there and next does not
// serve it: the manifest's preStop names srv's port, not the hook's, and
// the drain never hears of the hook. Nothing else says so: the kubelet
// takes any answer, a 404 too, for the hook's end (it records no
// FailedPreStopHook and logs nothing) and sends SIGTERM: no preStop wait,
// the gate closed only then. next's answer stands: the hook is not served
// here, where no secret guards it.
func (s *Server) misdirectedHook(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if kubeletsHook(r) && !servesHook(next) && s.misdirected.CompareAndSwap(false, true) {
			s.log.Error("drain: the kubelet's preStop hook came to the server's own address, where nothing serves GET "+hookPath+": "+
				"the drain never hears of it (no preStop wait; the kubelet takes any answer for the hook's end, records no failure and sends SIGTERM); "+
				"the hook is served on "+EnvHookListen+": give the manifest's lifecycle.preStop.httpGet its port "+
				"(a loopback hook an httpGet reaches only on the node's network, with host: 127.0.0.1; on a pod network set "+
				EnvHookListen+" to [$(POD_IP)]:PORT with "+EnvHookSecret+", or use the exec hook drainhook)",
				"hook", s.hook, "user_agent", r.UserAgent())
		}
		next.ServeHTTP(w, r)
	})
}

// kubeletsHook reports whether r is the kubelet's lifecycle httpGet hook,
// by its User-Agent (kube-lifecycle/VERSION; the kubelet's probes are
// kube-probe/).
func kubeletsHook(r *http.Request) bool {
	return strings.HasPrefix(r.UserAgent(), "kube-lifecycle/")
}

// servesHook reports whether h, srv's handler, serves GET /drain itself:
// an *http.ServeMux with a pattern for it (a catch-all "/" is not one).
// Behind another Handler it cannot tell, and says it does.
func servesHook(h http.Handler) bool {
	mux, ok := h.(*http.ServeMux)
	if !ok {
		return true
	}
	_, pattern := mux.Handler(&http.Request{Method: http.MethodGet, URL: &url.URL{Path: hookPath}, Host: "localhost"})
	return strings.HasSuffix(pattern, hookPath)
}

// ownReadiness is the handler of GET /readyz that the ServeMux h has, or
// nil when h is not a ServeMux or has none (a catch-all "/" is not one).
func ownReadiness(h http.Handler) http.Handler {
	mux, ok := h.(*http.ServeMux)
	if !ok {
		return nil
	}
	own, pattern := mux.Handler(&http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/readyz"}, Host: "localhost"})
	if !strings.HasSuffix(pattern, "/readyz") {
		return nil
	}
	return own
}

// checkHook refuses a hook address no listener can have (a port past
// 65535, none: Run would fail at its listener, or listen on a random port
// no kubelet's hook finds), and one anyone on the network could reach
// without a secret: one request there drains the node.
func (s *Server) checkHook() error {
	if err := listenaddr.Check(s.hook); err != nil {
		return fmt.Errorf("drain: %s=%q %w", EnvHookListen, s.hook, err)
	}
	if strings.TrimSpace(s.secret) == "" && !listenaddr.Loopback(s.hook) { // white space alone is no secret (HookGuard.Secret)
		return fmt.Errorf("drain: %s=%q is not loopback: set %s too, or anyone who can reach it can drain the node",
			EnvHookListen, s.hook, EnvHookSecret)
	}
	if err := listenaddr.CheckSecret(EnvHookSecret, s.secret); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	return nil
}

// Admit returns h gated as a create: served until the drain starts, then
// answered 503 with Retry-After on a connection it then closes (see
// Gate.Admit), so no new sandbox lands on a node that is going away and
// the client's retry goes to another. Gate operations on existing sandboxes through Drainer().Gate(),
// whose Pause, Checkpoint and Delete are exempt (they take work off the
// node, and are admitted while it drains), and so are Stream (a follow of a
// sandbox still running here has nowhere else to go) and KeepAlive (refused
// during the preStop wait, which may last the whole grace, it would let
// the server's own timeout end a sandbox the drain preserves). Every other
// class, Snapshot included, is refused from the preStop call on.
// As with Gate.Admit, a create that boots its sandbox after h returned must
// have it listed from then on. A call that streams for as long as its
// client keeps it open (a log follow, an attach, a long-poll) is no
// create: admitted here it would hold the preserve phase to its deadline
// and fail it. Admit it with Drainer().Gate().Admit(drain.Stream, h): it
// is served while the sandboxes run, never waited for, and ended (its
// request's context) once they are preserved.
func (s *Server) Admit(h http.Handler) http.Handler {
	if !s.made() {
		return notMadeHandler(notMadeServer)
	}
	return s.d.Gate().Admit(Create, h)
}

// Drainer returns the Drainer, for what the one-call path does not cover
// (nil for a Server not made by NewServer).
func (s *Server) Drainer() *Drainer {
	if !s.made() {
		return nil
	}
	return s.d
}

// Run serves srv and the preStop hook until SIGTERM (or SIGINT, or ctx
// ending, or srv's serving stopping: below), drains, and returns the exit
// code: 0 when the Report has no error and serving never stopped on its
// own, 1 otherwise, 2 when a listener could not be opened,
// srv.TLSConfig has no certificate or s was not made by NewServer (see
// Server). It serves srv as ListenAndServe would
// (on srv.Addr, ":http" when empty) or, with srv.TLSConfig set, as
// ListenAndServeTLS("", "") would: over TLS with TLSConfig's Certificates,
// GetCertificate or GetConfigForClient, on ":https" when srv.Addr is
// empty. A SIGINT after the first signal forces; a SIGTERM again does not
// (the kubelet's own, a restarted one's stop: see Drainer.ServeSignals). SIGHUP is logged and ignored, and SIGQUIT logs every
// goroutine's stack and Run goes on: their default action would end the
// process at once, with no drain. The Report is logged through slog.Default; Run never calls
// os.Exit. After a Run that returned 0 or 1, s.Drainer().Shutdown returns
// that Report at once (Shutdown is single-flight), for a server that keeps
// it in a file; after 2 nothing drained, and Shutdown would start a drain.
// After 0 or 1 SIGTERM stays caught until the process exits, as after
// Drainer.HandleSignals: the kubelet's SIGTERM again while the server
// writes that file is dropped, where it ended the process with status 143,
// the file cut short; after 2 it is caught as before Run (below), for a
// Run again.
//
// Run serves and drains once. A second call, while the first runs or
// after it returned, serves nothing: it logs "drain: Server.Run called
// twice" at Error and returns 2 at once, leaving the first alone. Only a
// Run that returned 2 before serving (a listener it could not open, no
// certificate) may be called again.
//
// Serving that stops on its own (the listener's Accept fails for good) is
// logged and makes Run return 1. When srv stops, Run drains at once, as at
// SIGTERM: a server no client nor readiness probe can reach is of no use,
// its sandboxes are preserved while the process still holds them (a Run
// that returned at once would take them with it), and the exit status
// lets the kubelet restart the container; a preStop call then still open
// keeps the hook's grace (see Drainer.ServeSignals: no SIGTERM came). When
// the hook's server stops, Run goes on serving srv and drains at SIGTERM
// (the kubelet's preStop call fails and it sends SIGTERM at once), then
// returns 1.
//
// Call Run early: until it starts, the preStop hook is not served (the
// kubelet records the hook as failed and sends SIGTERM). SIGTERM is caught
// from NewServer's call on: one that comes before Run (a pod deleted while
// the server starts) is logged at Warn when Run begins, and Run drains at
// once, the grace counted from NewServer's call, the earliest the SIGTERM
// can have come (SIGKILL planned early, never late); before NewServer
// SIGTERM has Go's default action. A Server made and never Run keeps
// SIGTERM caught (dropped) until the process exits. A server that restores
// sandboxes at start restores them while Run serves (in a goroutine), not
// before it.
func (s *Server) Run(ctx context.Context) int {
	if !s.made() {
		slog.Default().Error(notMadeServer + ": Run serves nothing, drains nothing")
		return 2
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(sigs)
	// Their default action would end the process at once: no drain, no
	// Report, every sandbox lost.
	stop := hupquit.Handle(s.log, "the server")
	defer stop()
	code := s.serve(ctx, sigs)
	if code != 2 { // drained: SIGTERM stays caught until the exit (row 1111)
		keepCaught(syscall.SIGTERM)
	}
	return code
}

// serve is Run with the signals from sigs.
func (s *Server) serve(ctx context.Context, sigs chan os.Signal) int {
	if !s.running.CompareAndSwap(false, true) {
		s.log.Error("drain: Server.Run called twice: it serves and drains once; this call serves nothing")
		return 2
	}
	served := false
	defer func() {
		if !served { // nothing served, nothing drained: Run may be called again
			s.running.Store(false)
		}
	}()
	if c := s.srv.TLSConfig; c != nil && len(c.Certificates) == 0 && c.GetCertificate == nil && c.GetConfigForClient == nil {
		s.log.Error("drain: srv.TLSConfig has no certificate (Certificates, GetCertificate or GetConfigForClient): Run has no files to load one from")
		return 2
	}
	if s.wrapHandler() {
		s.log.Info("drain: srv.Handler was set after NewServer: GET /readyz is served in front of it again")
	}
	ln, err := listenTCP("tcp", listenAddr(s.srv))
	if err != nil {
		s.log.Error("drain: listen", "addr", listenAddr(s.srv), "err", err)
		return 2
	}
	hookLn, err := listenTCP("tcp", s.hook)
	if err != nil {
		_ = ln.Close()
		s.log.Error("drain: listen for the preStop hook", "addr", s.hook, "err", err)
		return 2
	}
	hooks := &http.Server{Handler: s.hookHandler(), ReadHeaderTimeout: 10 * time.Second}
	ctx, stopped := context.WithCancelCause(ctx)
	defer stopped(nil)
	var failed atomic.Bool // srv or the hook stopped serving on its own
	go func() {
		if s.serveSrv(ln) {
			failed.Store(true)
			stopped(errStoppedServing) // drain now: see Run
		}
	}()
	go func() {
		if err := hooks.Serve(hookLn); !errors.Is(err, http.ErrServerClosed) {
			failed.Store(true)
			what := "the kubelet's preStop call fails, SIGTERM still drains"
			if s.d.term.Err() != nil {
				what = s.drainNow()
			}
			s.log.Error("drain: serving the preStop hook stopped: "+what+"; Run will return 1",
				"addr", hookLn.Addr().String(), "err", err)
		}
	}()
	defer hooks.Close()
	served = true
	s.log.Info("drain: serving", "addr", ln.Addr().String(), "hook", hookLn.Addr().String())
	select { // tests read it; nobody else does
	case s.listening <- [2]net.Addr{ln.Addr(), hookLn.Addr()}:
	default:
	}
	s.termBeforeRun(sigs) // sigs has SIGTERM: preRun may stop
	rep := s.d.ServeSignals(ctx, sigs)
	if rep.Err() != nil || failed.Load() {
		return 1
	}
	return 0
}

// termBeforeRun hands sigs, Run's channel, a SIGTERM preRun caught for
// s, and releases preRun. Such a SIGTERM came between NewServer's call and
// now, while nothing answered the kubelet's preStop call: no hook ran, and
// the kubelet counts the grace from that SIGTERM. When is not known
// (os/signal says only that it came): the budget takes the earliest it
// can have been, NewServer's call, and plans SIGKILL early, never late
// (taken at the drain's start, it would be as late as the start took).
// ServeSignals then drains at once.
func (s *Server) termBeforeRun(sigs chan os.Signal) {
	preRun.Lock()
	lookLocked()
	came := preRun.term > s.look
	preRun.Unlock()
	s.releaseTerm()
	if came {
		s.d.Budget().OnSIGTERM(s.caught)
		s.log.Warn("drain: SIGTERM came before Run: draining now, as the server serves; the grace is counted from NewServer's call, the earliest it can have come",
			"since", time.Since(s.caught).Round(time.Millisecond))
		select {
		case sig := <-sigs: // it came once Run's channel was registered too: there once
			sigs <- sig
		default:
			sigs <- syscall.SIGTERM // Run's channel is new and empty: room for it
		}
	}
}

// errStoppedServing is the Report's Cause when the server's serving
// stopped on its own (logged with why) and Run drained at once.
var errStoppedServing = errors.New("the server stopped serving on its own")

// listenTCP is net.Listen; tests make the listeners fail.
var listenTCP = net.Listen

// serveSrv serves srv on ln, over TLS when srv.TLSConfig is set, until
// srv shuts down, and reports whether it stopped otherwise (logged).
func (s *Server) serveSrv(ln net.Listener) bool {
	var err error
	if s.srv.TLSConfig != nil {
		err = s.srv.ServeTLS(ln, "", "") // the certificates are TLSConfig's (checked by serve)
	} else {
		err = s.srv.Serve(ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return false
	}
	s.log.Error("drain: serving stopped: "+s.drainNow()+"; Run will return 1", "addr", ln.Addr().String(), "err", err)
	return true
}

// drainNow says what a serving that stopped on its own does to the
// drain: starts it now, or, once Shutdown has begun (a SIGTERM came
// first), nothing: the drain under way goes on.
func (s *Server) drainNow() string {
	if s.d.term.Err() != nil {
		return "the drain under way goes on"
	}
	return "draining now"
}

// listenAddr is where Run serves srv: srv.Addr, or when it is empty
// ":http" (":https" with srv.TLSConfig), as srv.ListenAndServe (and
// ListenAndServeTLS) would; net.Listen would take "" for a random port.
func listenAddr(srv *http.Server) string {
	switch {
	case srv.Addr != "":
		return srv.Addr
	case srv.TLSConfig != nil:
		return ":https"
	}
	return ":http"
}

// hookHandler is GET /drain, guarded, and 404 for the rest (notTheHook).
func (s *Server) hookHandler() http.Handler {
	mux := http.NewServeMux()
	guard := &HookGuard{Secret: s.secret, Logger: s.log}
	mux.Handle("GET "+hookPath, guard.Wrap(s.d.PreStop()))
	mux.Handle("/", s.notTheHook())
	return mux
}

// notTheHook answers 404 on the hook's address for all but GET /drain,
// and says at Error, once, when the kubelet's httpGet hook came (its path
// in the manifest not /drain): the kubelet takes the 404 for the hook's
// end, with no event and no line in its log, and sends SIGTERM, and the
// drain never hears of the hook.
func (s *Server) notTheHook() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if kubeletsHook(r) && s.misdirected.CompareAndSwap(false, true) {
			s.log.Error("drain: the kubelet's preStop hook came to the hook's address at another path: the drain never hears of it "+
				"(no preStop wait; the kubelet takes the 404 for the hook's end, records no failure and sends SIGTERM); "+
				"the hook is GET "+hookPath+": give the manifest's lifecycle.preStop.httpGet that path",
				"method", r.Method, "path", r.URL.Path, "hook", s.hook)
		}
		http.NotFound(w, r)
	})
}
