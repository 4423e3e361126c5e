//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/examples/internal/daemonhold"
	"github.com/drainkit/drainkit/examples/internal/podstart"
	"github.com/drainkit/drainkit/internal/follow"
	"github.com/drainkit/drainkit/internal/kubeletconf"
	"github.com/drainkit/drainkit/internal/lastreport"
	"github.com/drainkit/drainkit/internal/learned"
	"github.com/drainkit/drainkit/internal/logonce"
	"github.com/drainkit/drainkit/internal/measured"
	"github.com/drainkit/drainkit/internal/promexport"
	"github.com/drainkit/drainkit/internal/signame"
	"github.com/drainkit/drainkit/internal/termmsg"
	"github.com/drainkit/drainkit/internal/ublkstep"
	"github.com/drainkit/drainkit/kube"
	"github.com/drainkit/drainkit/pause"
	"github.com/drainkit/drainkit/pause/httpsource"
	"github.com/drainkit/drainkit/ublk"
)

// Step names in the plan and the Report.
const (
	StepServer = "server"
	StepDaemon = "daemon"
)

// forwarded are the signals passed on to the server as they come: each
// is an operator's request to the server. SIGTERM and SIGINT are not: the
// first starts the shutdown, which sends the server its SIGTERM once every
// sandbox is preserved; a SIGINT after it forces, a SIGTERM again does not
// (see supervise). Neither are kept (below).
var forwarded = []os.Signal{syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH}

// kept are the signals the supervisor handles itself and never forwards: a
// server with the default disposition dies of either, taking every sandbox
// with it, and the supervisor with its daemon would follow. SIGHUP (a
// closed terminal, or a reload request: the supervisor has no
// configuration to reload) is logged and ignored; SIGQUIT dumps the
// supervisor's goroutines to stderr, as a Go program's SIGQUIT would, and
// the supervisor goes on. To reload the server, signal it directly.
var kept = []os.Signal{syscall.SIGHUP, syscall.SIGQUIT}

// A Report is what the supervisor writes to -report and logs at exit.
type Report struct {
	// Drain is the drain package's account of the termination: the preStop
	// wait, every sandbox's outcome, each step and the headroom left before
	// SIGKILL. Nil when the server exited on its own.
	Drain  *drain.Report `json:"drain,omitempty"`
	Server ChildState    `json:"server"`
	Daemon *ChildState   `json:"daemon,omitempty"`
	// OwnedDaemon is the server's own daemon (-daemon-socket).
	OwnedDaemon *OwnedDaemonState `json:"owned_daemon,omitempty"`
	// Ublk is the device teardown's account when the supervisor ran it
	// outside a drain (the server exited on its own); during a drain it is
	// the daemon step's Detail in Drain.
	Ublk *ublk.Report `json:"ublk,omitempty"`
	// LostWithServer lists the sandboxes lost with a server that exited on
	// its own before any termination, or during a drain (after T0, before
	// the supervisor's SIGTERM): the ones its last listing that succeeded
	// (or failed after its first page: recorder) showed not paused and
	// that no preserve accounted for (exited.go). Its own shutdown may have
	// paused some; nothing can list them any more, and a sandbox not known
	// preserved is counted lost. When the drain's server step ran after
	// the exit, they are in Drain's account too, not started (counted once
	// by Lost), so that drain's log line, DrainFinished and Report.Err
	// count them.
	LostWithServer []string `json:"lost_with_server,omitempty"`
	OrphansReaped  int      `json:"orphans_reaped"`
	ExitCode       int      `json:"exit_code"`
	Note           string   `json:"note,omitempty"`
}

type supervisor struct {
	cfg       config
	log       *slog.Logger
	stderr    io.Writer
	budget    *deadline.Budget
	src       *httpsource.Source
	listed    *recorder    // src's listing, the running ones: the Preserver's
	counted   *recorder    // what readiness, the preStop wait and the plan list: listed, or notPaused's; its last IDs kept (exited.go)
	sweepList pause.Lister // what the final sweep lists: src's running ones, or notPaused's (settle.go)
	drainer   *drain.Drainer
	progress  *lastreport.Progress // the drain's account in -report while it runs; nil without -report
	preserver *limited
	learned   *learned.Start     // from what the last drain learned (-state-dir); saves this one's
	pod       *kube.Pod          // this pod in the Kubernetes API (-pod); nil: none
	kubelet   time.Duration      // drain.Config.KubeletGrace: -kubelet-grace, or zero without the pod (kubeletGrace)
	steps     []drain.Step       // the teardown steps, in order
	teardown  *ublkstep.Teardown // nil without -daemon or -daemon-socket
	owned     *ownedDaemon       // the server's daemon, with -daemon-socket
	procs     *procTable
	server    *child
	daemon    *child

	termSent     atomic.Bool                 // the server step has sent the server its SIGTERM
	exitedDuring atomic.Bool                 // the server exited on its own during a drain, before termSent
	exitedBefore atomic.Bool                 // the server exited on its own before any termination
	sweepUnknown atomic.Pointer[sweepFault]  // the final sweep could not list, or not completely
	sweepWin     sweepWindow                 // the final sweep's layout in the server step (serverStep.Tighten)
	keyRefused   logonce.Failures            // the listings refused 401 or 403 since one succeeded, by status
	notReady     logonce.Failures            // readiness's other failed listings since one succeeded (logNotReady)
	probeGaveUp  logonce.Failures            // readiness listings its probe's end cut since one answered (logProbeGaveUp)
	lastUblk     atomic.Pointer[ublk.Report] // the daemon step's last account (holdWhileDaemonServes)
	hooksOpen    atomic.Int32                // preStop requests the drainer has not answered yet (hookRoutes)
	// daemonStopping is set once a teardown of the daemon began (stopDaemon):
	// its exit is asked for from then. daemonLost says why the -daemon child
	// serves no more when it exited before (supervise): readiness, the
	// Report's note and the exit status say it.
	daemonStopping atomic.Bool
	daemonLost     atomic.Pointer[string]

	// meters feeds GET /metrics on -listen: the OpenTelemetry metrics of
	// the drain, the pauses, the API requests and the device teardown, in
	// Prometheus's format.
	meters  *sdkmetric.MeterProvider
	metrics http.Handler
}

// stepReserve is what each teardown step (the server's exit, the daemon's
// teardown) reserves: a tenth of the grace period, between 500 ms and 30 s.
// In a drain the grace is the one the kubelet uses (see liveStepReserve).
func stepReserve(grace time.Duration) time.Duration {
	return min(max(grace/10, 500*time.Millisecond), 30*time.Second)
}

// liveStepReserve is a teardown step's reserve, stepReserve of the grace
// in use, evaluated whenever the plan reads it: kubectl delete
// --grace-period=30 of a supervisor whose -grace is an hour gives each step
// the 3 s of a 30 s supervisor. Sized from -grace, the daemon step,
// critical, would keep its 30 s and take all the 27 s the margin (3 s, a
// tenth of the grace in use) leaves, the preserve phase none: every
// sandbox lost.
func (s *supervisor) liveStepReserve() deadline.Reserve {
	return func() time.Duration { return stepReserve(s.budget.GraceInUse()) }
}

func newSupervisor(cfg config, stderr io.Writer) (*supervisor, error) {
	s := &supervisor{cfg: cfg, log: slog.New(slog.NewTextHandler(stderr, nil)), stderr: stderr}
	s.procs = newProcTable(s.log)
	var err error
	if s.budget, err = deadline.New(cfg.grace, deadline.Config{}); err != nil {
		return nil, fmt.Errorf("-grace: %w", err)
	}
	if s.meters, s.metrics, err = promexport.New(); err != nil {
		return nil, err
	}
	api := cfg.api.Config()
	api.Logger, api.MeterProvider, api.Client = s.log, s.meters, cfg.client
	if api.APIKey == "" && api.APIKeyFile == "" { // the flags gave none (a test's config)
		api.APIKey = cfg.apiKey
	}
	// What New refuses is named by its Config field; the operator set a
	// flag, or the key's variable or file, which the error names instead
	// (apiFlagNames). One it does not name has the suspects before it.
	badAPI := func(err error) error {
		if named := apiFlagNames.Replace(err.Error()); named != err.Error() {
			return renamed{named, err}
		}
		return fmt.Errorf("-server-url, the API flags (-api, -list-path, ...) or the API key (%s): %w", cfg.api.KeySource(), err)
	}
	if s.src, err = httpsource.New(cfg.serverURL, api); err != nil { // reads -api-key-file: parseArgs leaves it to httpsource
		return nil, badAPI(err)
	}
	s.listed = &recorder{list: s.src, last: &lastListing{}}
	s.sweepList, s.counted = s.src, s.listed
	if cfg.api.API == APIAgentENV {
		np, err := newNotPaused(s.src, cfg.serverURL, api)
		if err != nil {
			return nil, badAPI(err)
		}
		// A sandbox being snapshotted or forked, which AgentENV lists as
		// paused, runs again once that ends and needs its pause: the
		// preStop wait waits for it, and the plan's preserve reserve counts
		// it, as the final sweep lists it. It is not persisted either (only
		// paused records are): a server that exits on its own takes it
		// along, so the last listing kept is this one, which the preserve
		// phase's of the running ones must not overwrite.
		s.sweepList, s.counted = np, &recorder{list: np, last: s.listed.last}
		s.listed = &recorder{list: s.src}
	}
	steps := []drain.Step{serverStep{drain.NewStep(deadline.Phase{Name: StepServer, Reserve: s.liveStepReserve()},
		s.stopServer), &s.sweepWin}}
	if cfg.daemonSock != "" {
		s.owned = newOwnedDaemon(cfg.daemonSock, s.log, s.serverPid)
	}
	if len(cfg.daemon) > 0 || s.owned != nil {
		if s.teardown, err = s.newTeardown(); err != nil {
			return nil, fmt.Errorf("-daemon: %w", err)
		}
		// The teardown's phase is critical: pauses still in flight may use
		// the server step's time (the server must finish them anyway) but
		// never the daemon's: it must stop before SIGKILL, and on a
		// vulnerable kernel must never be killed with live devices.
		phase := s.teardown.Phase() // its reserve the grace in use's (liveStepReserve)
		phase.Name = StepDaemon
		steps = append(steps, daemonStep{drain.NewStep(phase, func(ctx context.Context) (any, error) { return s.stopDaemon(ctx) }), s.teardown})
	}
	s.steps = steps
	s.pod = s.newPod()
	if s.kubelet, err = s.kubeletGrace(); err != nil {
		return nil, err
	}
	// From what the last drain learned (-state-dir): the estimate of a pause and,
	// adaptive, the level its first epoch checks against that estimate.
	//
	// The supervisor does not wait for the directory (internal/statedir,
	// docs/faults.md entry 82): the rates file is all it keeps there, and a wait
	// would hold the server's start behind the old pod's whole drain. The file's
	// own lock (learned.Server.Start) leaves it to the old pod until that one has
	// saved and exited: this one starts from the file as it is (the drain
	// before, still this node's) and takes it over then.
	s.learned = learned.Server{Dir: cfg.stateDir, Concurrency: cfg.concurrency, Ceiling: maxConcurrency,
		Prior: defaultEstimate, Budget: s.budget, KubeletGrace: s.kubelet, Logger: s.log}.Start()
	err = s.build(s.learned.Config())
	if err != nil {
		// What was learned is a prior, never a reason not to start: a learned estimate
		// whose round no longer fits the grace (shortened since) is set aside.
		if cold, ok := s.learned.Cold(err); ok {
			err = s.build(cold)
		}
	}
	if err != nil {
		s.learned.Close()
		return nil, err
	}
	return s, nil
}

// apiFlagNames puts, in httpsource.New's errors, the flag (or variable) the
// supervisor sets each Config field from in place of the field: "-pause-path
// must contain "{id}", got ...": the operator wrote a flag, not
// httpsource's Config.PausePath, and is sent to that flag alone
// (docs/faults.md row 1181). A longer name comes before a name it begins
// with: the Replacer tries them in this order at each position.
var apiFlagNames = strings.NewReplacer(
	"httpsource: baseURL", "-server-url",
	"httpsource: Config.ListPath", "-list-path",
	"httpsource: Config.FallbackListPath", "-fallback-list-path",
	"httpsource: Config.PausePath", "-pause-path",
	"httpsource: Config.PageTokenHeader and Config.PageTokenParam", "-next-token's HEADER and PARAM",
	"httpsource: Config.PageTokenHeader", "-next-token's HEADER",
	"httpsource: Config.APIKeyFile", "-api-key-file",
	"httpsource: Config.APIKey", "$"+EnvAPIKey,
)

// renamed is err said in other words, msg (apiFlagNames', or the flag
// package's text of a -ublk-kernel value refused): its chain is err's, so
// that what the machine refused in it (a key file or a declarations file
// that does not exist: ENOENT) still sets Main's exit status (startStatus).
type renamed struct {
	msg string
	err error
}

func (r renamed) Error() string { return r.msg }
func (r renamed) Unwrap() error { return r.err }

// defaultEstimate is the estimate of one pause before any was measured:
// pause's own default.
const defaultEstimate = time.Second

// build makes the Preserver from pc (its limit and Estimator, from what was
// learned) and the Drainer.
func (s *supervisor) build(pc pause.Config) error {
	// pc.BackOff is left to pause: its default retries a failing pause
	// until no retry fits before the phase deadline (docs/faults.md rows
	// 1762, 1920).
	pc.Logger, pc.MeterProvider = s.log, s.meters
	p, err := pause.New(s.listed, pc)
	if err != nil {
		return fmt.Errorf("-concurrency: %w", err)
	}
	s.preserver = &limited{Preserver: p, src: s.src}
	s.preserver.cold.Store(pc.Limit == 0) // adaptive from the default start: nothing learned, no -concurrency
	cfg := drain.Config{
		Budget:        s.budget,
		Sandboxes:     s.counted,
		Preserver:     s.preserver,
		Steps:         s.steps,
		Logger:        s.log,
		MeterProvider: s.meters,
		Pod:           s.pod,
		KubeletGrace:  s.kubelet,
	}
	if s.cfg.report != "" {
		// This drain's account in -report from its start, in its "drain" member, so that a
		// SIGKILL mid-drain leaves it, unfinished, rather than an earlier drain's Report
		// (docs/faults.md row 1513). The server's sandboxes are listed over HTTP, not
		// cheaply: the drain's count alone.
		s.progress = lastreport.Follow(&cfg, s.cfg.report, 0o666, s.log, nil).In("drain")
	}
	s.drainer, err = drain.New(cfg)
	if err != nil {
		return fmt.Errorf("-grace %v too short: %w", s.cfg.grace, err)
	}
	return nil
}

// EnvServiceAccountDir, when set, is where the supervisor reads its service
// account (token, ca.crt, namespace) instead of kube.ServiceAccountDir: the
// tests' API server on loopback.
const EnvServiceAccountDir = "SUPERVISOR_SERVICE_ACCOUNT_DIR"

// newPod returns this pod in the Kubernetes API (-pod), or nil when there is
// none or no service account is mounted: the drain then goes on with -grace
// and posts no Events. With it, drain reads the pod's deletionTimestamp
// (kubectl delete --grace-period, an eviction: a grace shorter than -grace)
// and posts the drain's Events on the pod.
func (s *supervisor) newPod() *kube.Pod {
	if s.cfg.pod == "" {
		return nil
	}
	cfg := kube.Config{Logger: s.log, MeterProvider: s.meters, UID: s.cfg.podUID}
	if dir := os.Getenv(EnvServiceAccountDir); dir != "" {
		ns, err := os.ReadFile(filepath.Join(dir, "namespace"))
		if err != nil {
			s.log.Warn("supervisor: no Kubernetes API access: -grace stands, no Events", "error", err)
			return nil
		}
		cfg.Namespace = strings.TrimSpace(string(ns))
		cfg.TokenFile, cfg.CAFile = filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	}
	pod, err := kube.New(s.cfg.pod, cfg)
	if err != nil {
		s.log.Warn("supervisor: no Kubernetes API access: -grace stands, no Events", "error", err)
		return nil
	}
	podstart.Read(pod, s.log) // before drain.New: a POD_NAME or POD_UID not naming the pod is said at start
	return pod
}

// kubeletGrace is -kubelet-grace, or what -kubelet-config gives this pod;
// zero, logged, without the pod: only its missing deletionTimestamp tells
// the kubelet's own termination from a deletion.
func (s *supervisor) kubeletGrace() (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // the pod's priority
	defer cancel()
	set := kubeletconf.Setting{GraceName: "-kubelet-grace", ConfigName: "-kubelet-config", Grace: s.cfg.kubelet, Config: s.cfg.kubeletConf}
	return set.Resolve(ctx, s.pod, s.log, "(-pod): only its missing deletionTimestamp tells the kubelet's own termination from a deletion")
}

// maxConcurrency is the ceiling of the adaptive limit: pause's own.
const maxConcurrency = 32

// limited is the Preserver as drain sees it. Its concurrency, for the
// preserve phase's live reserve, is never more than the Source learned the
// server takes (after 429s), so the plan does not count on parallelism the
// server refuses.
type limited struct {
	*pause.Preserver
	src    *httpsource.Source
	listed atomic.Bool // a Run's listing succeeded: the final sweep may list too
	// cold is set while the limit adapts from the default start (no level
	// learned, no -concurrency) and no Run has measured a preserve: the
	// Preserver's Limit is then 1, what the plan may count on, not a level
	// the node was measured at (sweepConfig).
	cold atomic.Bool

	mu        sync.Mutex
	accounted map[string]pause.Outcome // the sandboxes its Runs have an entry for (exited.go), with the last one's outcome (sweepAccount)
}

// Run runs the Preserver and notes whether its listing succeeded, and the
// sandboxes its account has an entry for.
func (l *limited) Run(ctx context.Context, hard time.Time) *pause.Report {
	rep := l.Preserver.Run(ctx, hard)
	if !rep.Unknown {
		l.listed.Store(true)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.accounted == nil {
		l.accounted = make(map[string]pause.Outcome, len(rep.Entries))
	}
	for _, e := range rep.Entries {
		l.accounted[e.ID] = e.Outcome
		if measured.Sample(measured.Preserve{Preserved: e.Outcome == pause.Preserved, Attempts: e.Attempts, Relisted: e.Relisted, Took: e.Duration}) {
			l.cold.Store(false) // the Preserver measured a preserve at its limit: Limit reports it
		}
	}
	return rep
}

// sweepConfig is the limit of the final sweep's Preserver: the level the
// drain's measured (or learned, or -concurrency's), fixed; or, while the
// drain's Preserver is cold (it measured nothing: its Limit of 1 is what
// the plan may count on, row 940), the adaptive limit from its start, as
// the drain's own Run starts. Fixed at that 1, the sweep paused what runs
// again one at a time, in half the server step's time: after a preserve
// phase that found nothing running (AgentENV's sandboxes snapshotted
// through it), 9 of 12 sandboxes paused where the adaptive limit pauses
// all 12 (docs/faults.md row 960). The Source's limit (after 429s) caps
// the requests in flight either way.
func (l *limited) sweepConfig() pause.Config {
	if l.cold.Load() {
		return pause.Config{MaxLimit: maxConcurrency}
	}
	return pause.Config{Limit: max(l.Limit(), 1)}
}

// hasEntry reports whether a Run's account has an entry for the sandbox id.
func (l *limited) hasEntry(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.accounted[id]
	return ok
}

// couldNotPause reports whether the last Run's entry for the sandbox id
// counts it lost: the preserve phase could not pause it (a pause that
// failed, timed out or was not started), so it never stopped running.
func (l *limited) couldNotPause(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	o, ok := l.accounted[id]
	return ok && o.Lost()
}

// lostIDs returns the sandboxes whose last Run's entry counts them lost,
// sorted.
func (l *limited) lostIDs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []string
	for id, o := range l.accounted {
		if o.Lost() {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// Limit is the concurrency the plan counts on.
func (l *limited) Limit() int { return min(l.Preserver.Limit(), l.src.Limit()) }

// run starts the children and supervises them until the termination is
// over, and returns the exit status. sigs holds the signals caught since
// Main began (catchSignals).
func (s *supervisor) run(ctx context.Context, sigs *caught) int {
	if err := becomeSubreaper(); err != nil {
		s.log.Warn("supervisor: cannot become a subreaper; orphans go to PID 1", "err", err)
	}
	defer s.learned.Close() // an early return: no Save, which closes it otherwise

	reapCtx, stopReaping := context.WithCancel(context.WithoutCancel(ctx))
	reaped := make(chan struct{})
	go func() { defer close(reaped); s.procs.reapLoop(reapCtx) }()
	defer func() { stopReaping(); <-reaped; s.procs.reap(); s.procs.killTree(time.Second, s.spared) }()

	ln, err := net.Listen("tcp", s.cfg.listen)
	if err != nil {
		s.log.Error("supervisor: -listen", "err", err)
		writeStartFailed(s.cfg.termLog, fmt.Errorf("-listen: %w", err), s.stderr)
		return 1
	}
	web := &http.Server{Handler: s.routes(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = web.Serve(ln) }()
	defer web.Close()
	hookLn, err := net.Listen("tcp", s.cfg.hookListen)
	if err != nil {
		s.log.Error("supervisor: -hook-listen", "err", err)
		writeStartFailed(s.cfg.termLog, fmt.Errorf("-hook-listen: %w", err), s.stderr)
		return 1
	}
	hook := &http.Server{Handler: s.hookRoutes(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hook.Serve(hookLn) }()
	defer hook.Close()

	if err := s.startChildren(); err != nil {
		s.log.Error("supervisor: starting children", "err", err)
		err = errors.Join(fmt.Errorf("starting children: %w", err), s.stopAfterFailure())
		writeStartFailed(s.cfg.termLog, err, s.stderr)
		s.holdWhileDaemonServes()
		return 1
	}
	if s.owned != nil {
		watchCtx, stopWatching := context.WithCancel(context.WithoutCancel(ctx))
		watched := make(chan struct{})
		go func() { defer close(watched); s.owned.watch(watchCtx) }()
		defer func() { stopWatching(); <-watched; s.owned.close() }()
	}
	if sig, at := sigs.begin(); sig != nil && !s.budget.Anchored() {
		// The SIGTERM came while the supervisor started: the kubelet counts
		// its grace from when it sent it, not from now (no preStop call
		// fixed T0 since).
		s.budget.OnSIGTERM(at)
		s.log.Info("supervisor: the termination begins after the "+signame.Name(sig)+" that came while it started",
			"arrived", at, "started_after", time.Since(at).Round(time.Millisecond))
	}
	s.progress.Start(s.drainer)
	rep := s.supervise(ctx, sigs.C)
	s.progress.Stop() // the Report finish writes is the last written
	s.finish(rep)
	s.learned.Save(rep.Drain, s.budget, s.steps)
	s.holdWhileDaemonServes()
	return rep.ExitCode
}

// holdWhileDaemonServes keeps the supervisor from exiting while a device
// daemon that dies with it still serves a device the daemon step left live
// (left_live, held) on a kernel not known fixed, where the daemon's death
// may crash the host: its -daemon child (Pdeathsig), or as PID 1 the
// server's own daemon (-daemon-socket: the kernel kills the whole PID
// namespace when its PID 1 exits). Exiting would SIGKILL it with its
// device live, the very kill the step refused. So does a daemon the step
// left running because it could not read sysfs to tell whether the daemon
// still serves a disk it does not have (ublk's DaemonReport.CannotTell).
// With the Report already
// written, it waits for the daemon's exit, unbounded: in a drain the
// kubelet's SIGKILL ends the wait at the grace's end; after the server
// exited on its own, the daemon's exit or the pod's SIGKILL does (signals
// stay caught). The wait is said at ERROR, the daemon's exit at INFO. The
// decision and the wait are examples/internal/daemonhold's, which sandboxd
// uses too.
func (s *supervisor) holdWhileDaemonServes() {
	rep := s.lastUblk.Load()
	if !daemonhold.Needed(rep) {
		return
	}
	var wait func(context.Context) error
	var pid int
	switch {
	case s.daemon != nil && s.daemon.pid() != 0:
		wait, pid = s.daemon.wait, s.daemon.pid()
	case s.owned != nil && os.Getpid() == 1 && !s.owned.state().Exited:
		wait, pid = s.owned.Wait, s.owned.pidOrZero()
	default:
		return
	}
	daemonhold.Wait(s.log, "supervisor", "the daemon step", rep, pid, wait)
}

func (s *supervisor) startChildren() error {
	var err error
	if len(s.cfg.daemon) > 0 {
		if s.daemon, err = s.procs.start(StepDaemon, s.cfg.daemon); err != nil {
			return err
		}
	}
	s.server, err = s.procs.start(StepServer, s.cfg.server)
	return err
}

// stopAfterFailure stops a daemon that was started when the server could
// not be, and returns the error of that stop: a daemon left running, or a
// device left live, which the termination message says too.
func (s *supervisor) stopAfterFailure() error {
	if s.daemon == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), stepReserve(s.cfg.grace))
	defer cancel()
	// The exit is 1 already (the server did not start).
	if _, err := s.stopDaemon(ctx); err != nil {
		s.log.Error("supervisor: stopping the daemon after the server failed to start", "err", err)
		return fmt.Errorf("stopping the daemon after the server failed to start: %w", err)
	}
	return nil
}

// supervise forwards signals and waits for the termination to finish, or
// for the server to exit on its own. The termination is the drain's
// ServeSignals, to which SIGTERM and SIGINT are relayed: the first begins
// it, a SIGTERM again is the kubelet's own and forces nothing (the pod's
// deletion is read again), a SIGINT forces, and the Report says which came
// (drain.Report.Cause and Signals), as every other drainkit server's does.
func (s *supervisor) supervise(ctx context.Context, sigs <-chan os.Signal) *Report {
	var shutdown chan *drain.Report
	var relay chan os.Signal // to ServeSignals, once the termination started
	serverDone := s.server.done
	var daemonDone <-chan struct{}
	if s.daemon != nil {
		daemonDone = s.daemon.done
	}
	start := func(sig os.Signal) {
		shutdown = make(chan *drain.Report, 1)
		relay = make(chan os.Signal, 8)
		if sig != nil {
			relay <- sig
		}
		go func() { shutdown <- s.drainer.ServeSignals(ctx, relay) }()
	}
	ctxDone := ctx.Done()
	for {
		select {
		case sig := <-sigs:
			switch {
			case s.otherSignal(sig):
			case shutdown == nil:
				s.log.Info("supervisor: termination starts", "signal", sig)
				start(sig)
			default:
				s.relay(relay, sig)
			}
		case <-ctxDone:
			ctxDone = nil
			if shutdown == nil {
				start(nil) // ServeSignals begins it on ctx: never forced
			}
		case <-serverDone:
			serverDone = nil
			if shutdown == nil {
				return s.serverExited(sigs)
			}
			if !s.termSent.Load() {
				s.exitedDuring.Store(true)
				s.log.Error("supervisor: the server exited during the shutdown; nothing left to preserve through it")
				s.drainer.Force()
			}
		case <-daemonDone:
			daemonDone = nil
			s.daemonExited()
		case rep := <-shutdown:
			return s.report(rep, "")
		}
	}
}

// daemonExited handles the exit of the -daemon child, which supervise sees
// when the reaper reaps it. Asked for by a teardown (stopDaemon), it is the
// teardown's to judge. Before one, the device daemon crashed, was killed
// (the OOM killer) or exited on its own (a daemon that forks into the
// background and exits 0 is not one the supervisor can stop): the server's
// devices are not served, and the supervisor had logged it at Info alone,
// kept /readyz 200 and, for a daemon that exited 0, ended a drain with
// exit status 0 and no word of it (docs/faults.md row 964). It is now an
// ERROR line, /readyz answers 503 naming it (no new sandbox for a node
// whose disks are not served), and the Report's note and an exit status of
// 1 at least say it. The server and its sandboxes run on: stopping them
// would lose every sandbox, and the termination preserves them.
func (s *supervisor) daemonExited() {
	if s.daemonStopping.Load() {
		return
	}
	msg := fmt.Sprintf("the device daemon (-daemon) %s on its own, before any teardown: its devices are not served", s.daemon.state())
	s.daemonLost.Store(&msg)
	s.log.Error("supervisor: "+msg+"; not ready from now (/readyz 503); the server and its sandboxes run on until the termination",
		"daemon_pid", s.daemon.pidNum)
}

// otherSignal handles sig if it is neither SIGTERM nor SIGINT, which
// are the termination's, and reports whether it did: SIGHUP is ignored,
// SIGQUIT dumps the goroutines, the others are forwarded to the server
// (see forwarded and kept).
func (s *supervisor) otherSignal(sig os.Signal) bool {
	switch sig {
	case syscall.SIGTERM, syscall.SIGINT:
		return false
	case syscall.SIGHUP:
		s.log.Warn("supervisor: SIGHUP ignored (not forwarded: it would kill a server that does not handle it)")
	case syscall.SIGQUIT:
		s.log.Warn("supervisor: SIGQUIT: goroutine dump follows; the supervisor goes on (not forwarded)")
		_ = pprof.Lookup("goroutine").WriteTo(s.stderr, 2)
	default:
		s.log.Info("supervisor: forwarding signal", "signal", sig)
		_ = s.server.signal(sig.(syscall.Signal))
	}
	return true
}

// relay hands sig, a SIGTERM or SIGINT during the termination, to the
// drain's ServeSignals (see supervise). Its buffer full (a signal storm),
// a SIGINT still forces; a SIGTERM again is only said.
func (s *supervisor) relay(relay chan<- os.Signal, sig os.Signal) {
	select {
	case relay <- sig:
	default:
		s.log.Warn("supervisor: signals come faster than the drain takes them: not relayed", "signal", sig)
		if sig == syscall.SIGINT {
			s.drainer.Force()
		}
	}
}

// serverExited handles a server that exited before SIGTERM: the daemon is
// stopped within the budget (a clean stop matters more than a quick one),
// and the supervisor exits with the server's status, so the kubelet
// restarts the container; a daemon step that failed (a device left live,
// the daemon left running, killed or crashed) makes it 1 at least and is
// in the note, as in a drain (daemonStepFailed). The budget is, before any
// termination, the grace period less the margin; once the preStop hook
// fixed T0, the budget's deadline, before the kubelet's SIGKILL, followed
// when it moves earlier (followBudget). A SIGINT from sigs while the
// daemon's teardown runs forces, as during a drain, and the teardown gets
// its reserve from then (forceDuringTeardown). Either way the sandboxes its
// last listing showed are lost with it (exited.go), and the exit status is
// 1 at least.
func (s *supervisor) serverExited(sigs <-chan os.Signal) *Report {
	s.log.Error("supervisor: the server exited on its own", "status", s.server.state().String())
	note := "the server exited on its own before termination"
	if s.budget.Anchored() {
		s.exitedDuring.Store(true)
		note = "the server exited on its own during the drain, before SIGTERM"
	} else {
		s.exitedBefore.Store(true)
	}
	var teardown *ublk.Report
	var stopErr error
	ctx, cancel := s.followBudget()
	defer cancel()
	if s.teardown != nil {
		stopSignals := s.forceDuringTeardown(sigs)
		teardown, stopErr = s.stopDaemon(ctx)
		stopSignals()
	}
	out := s.report(nil, "")
	if len(out.LostWithServer) == 0 { // else the lost sandboxes' note says it, with more
		out.addNote(note)
	}
	out.Ublk = teardown
	var failed *kube.Event
	if stopErr != nil {
		// As in a drain's daemon step (drain.Step's results).
		result, msg := drain.Failed, stopErr.Error()
		if ctx.Err() != nil {
			result = drain.TimedOut
			if cause := context.Cause(ctx); cause != ctx.Err() {
				msg += " (" + cause.Error() + ")"
			}
		}
		s.daemonStepFailed(out, result, msg)
		failed = daemonStepFailedEvent(teardown, result, msg)
	}
	s.eventServerExited(out, failed)
	return out
}

// errBudgetMoved ends the daemon's teardown after the server exited on its own at the
// deadline a budget that moved SIGKILL earlier gives it.
var errBudgetMoved = errors.New("the budget moved SIGKILL earlier: the teardown ends at its new deadline")

// followBudget returns the context of the daemon's teardown after the server exited on its
// own (serverExited): it ends at the budget's deadline and follows it when it moves earlier
// (the preStop wait's read of a deletion with a shorter grace), its Deadline reporting the
// latest, and tells the teardown each move first (ublk.Teardown.Tighten), which lays its
// stages out again before it, as drain does for the daemon step. Budget.Context takes the
// deadline once: the teardown's stages, the kill of a daemon that does not stop among them,
// stayed laid out for the old deadline, past the new SIGKILL, which would take the daemon
// with its devices live (docs/faults.md row 792). A move later is not followed: the
// teardown never moves its deadline later.
//
// It follows Force too (drain.Drainer.Force: a SIGINT, forceDuringTeardown) as drain
// does for the daemon step (forceReserve), by the same follow.Reserve: from the Force
// the teardown gets the step's reserve, if that ends earlier, told first and ended there
// with drain.ErrForced (forced before the teardown began, that reserve is its context's
// deadline, as a step's that begins forced). The
// teardown lays its stages out again in it by its own rules: no kill while a device may
// be live on a kernel not known fixed. Not followed, the Force left the teardown to the
// budget's deadline, up to the whole grace period (docs/faults.md row 851).
func (s *supervisor) followBudget() (context.Context, context.CancelFunc) {
	dl := s.budget.Deadline()
	parent, cancelDL := context.WithDeadline(context.Background(), dl)
	// The teardown's deadline, the latest the budget or a Force gave it:
	// its context (moved.Context) reports it as its Deadline.
	var moved follow.Deadline
	moved.Move(dl)
	// tell moves the deadline to dl if that is earlier, then tells the teardown, and
	// reports whether it moved it. The budget's follower and the Force's call it each
	// from its own goroutine: the deadline moves first, so that a Stop reading it now
	// misses no move.
	tell := func(dl time.Time) bool {
		if !moved.Move(dl) {
			return false
		}
		if s.teardown != nil {
			s.teardown.Tighten(dl)
		}
		return true
	}
	ctx, unfollow := follow.Earlier(parent, s.budget.Changed, func() (time.Time, bool) {
		dl := s.budget.Deadline()
		return dl, tell(dl)
	}, errBudgetMoved)
	ctx, unforce := follow.Reserve(ctx, s.drainer.Forced(), s.liveStepReserve(), tell, drain.ErrForced)
	return moved.Context(ctx), func() {
		unforce()
		unfollow()
		cancelDL()
	}
}

// forceDuringTeardown reads sigs while the daemon's teardown after the server exited on
// its own runs, as supervise reads them during a termination: a SIGINT forces
// (drain.Drainer.Force, which followBudget follows), a SIGTERM forces nothing (the
// kubelet's, or the runtime's sent again) but reaches the budget (sigtermDuringTeardown),
// and the others are handled as ever (otherSignal). Unread there, a SIGINT, an
// operator's request to end now, did nothing: the teardown ran to the budget's deadline.
// stop ends the reading and the pod's reads it started, and waits for them; nil sigs
// reads nothing.
func (s *supervisor) forceDuringTeardown(sigs <-chan os.Signal) (stop func()) {
	done := make(chan struct{})
	reads, endReads := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		reading := false
		for {
			select {
			case sig := <-sigs:
				switch {
				case s.otherSignal(sig):
				case sig == syscall.SIGINT:
					s.log.Warn("supervisor: SIGINT during the daemon's teardown after the server exited: forced, the teardown gets its reserve",
						"reserve", s.liveStepReserve()())
					s.drainer.Force()
				default:
					if s.sigtermDuringTeardown() && !reading {
						reading = true // the first SIGTERM's read goes on until one answers: a SIGTERM again adds none
						wg.Go(func() { s.deletionAtSIGTERM(reads) })
					}
				}
			case <-done:
				return
			}
		}
	})
	return func() {
		close(done)
		endReads()
		wg.Wait()
	}
}

// sigtermDuringTeardown takes a SIGTERM during the daemon's teardown after
// the server exited on its own into the budget, as drain's Shutdown takes
// the SIGTERM of a drain: with a preStop request still open, the kubelet
// gave up on the hook (its grace, shorter than -grace: a node shutdown's
// slice, an eviction, a deletion not read, ran out) and SIGKILL comes 2 s
// after it (deadline.Budget.OnHookAbandoned); with none, the kubelet's
// arithmetic (OnSIGTERM), which moves SIGKILL no earlier than the hook's
// T0 put it. followBudget follows a deadline moved earlier, the teardown
// laid out again before it. The preStop wait goes on when the server dies
// (a listing that fails is no count), so the hook stays open while the
// teardown runs: left out of the budget, that SIGTERM left the teardown
// laid out for T0 + grace, its stages and the daemon's kill past the
// SIGKILL that took the daemon with its device live (docs/faults.md row
// 961). It forces nothing: a SIGINT does.
//
// It reports whether the pod's deletion is to be read now
// (deletionAtSIGTERM): with -pod, when no preStop call came before (the
// drain's read at the call has it otherwise), and no hook is open (SIGKILL
// 2 s after the SIGTERM then, whatever the deletion says). OnSIGTERM alone
// counts -grace from the SIGTERM, where a deletion's grace (kubectl delete
// --grace-period, an eviction) or the kubelet's own (-kubelet-grace) may be
// shorter (docs/faults.md row 1050).
func (s *supervisor) sigtermDuringTeardown() (readPod bool) {
	now := time.Now()
	if s.hooksOpen.Load() > 0 {
		s.budget.OnHookAbandoned(now)
		s.log.Warn("supervisor: SIGTERM during the daemon's teardown after the server exited, with the preStop hook still open: the kubelet gave up on it, SIGKILL comes 2 s after SIGTERM; the teardown follows (a SIGINT forces)",
			"deadline", s.budget.Deadline().Format(time.RFC3339Nano))
		return false
	}
	preStop := s.budget.State().Anchor == deadline.AnchorPreStop
	s.budget.OnSIGTERM(now)
	s.log.Info("supervisor: SIGTERM during the daemon's teardown after the server exited: the budget takes the kubelet's arithmetic; it forces nothing (a SIGINT does)",
		"deadline", s.budget.Deadline().Format(time.RFC3339Nano), "pod_read", s.pod != nil && !preStop)
	return s.pod != nil && !preStop
}

// deletionAtSIGTERM reads the pod's deletion after a SIGTERM during the
// daemon's teardown that no preStop call came before (sigtermDuringTeardown),
// as drain reads it at a drain's SIGTERM, and gives it to the budget, which
// followBudget follows: the deletionTimestamp (Budget.Tighten: a deletion's
// grace shorter than -grace), or, with no deletion (graceful node shutdown),
// the kubelet's own grace from T0 (-kubelet-grace), or after a force
// deletion the kubelet's 2 s (forceDeleted). Without the read the
// budget counted -grace from the SIGTERM: a deletion with a shorter grace
// SIGKILLed the daemon mid-teardown, its devices live, before the Report
// was written. A read that fails leaves the budget as it is, is logged at
// Warn once, and is tried again every podPoll until ctx ends (the teardown's
// end).
func (s *supervisor) deletionAtSIGTERM(ctx context.Context) {
	warned := false
	for {
		rctx, cancel := context.WithTimeout(ctx, podReadTimeout)
		del, err := s.pod.Deletion(rctx)
		cancel()
		switch {
		case err == nil:
			changed := s.budget.Tighten(del.Timestamp)
			s.log.Info("supervisor: the pod's deletion read at the SIGTERM during the daemon's teardown: the teardown follows it",
				"deletion_timestamp", del.Timestamp, "grace", del.Grace, "tightened", changed, "deadline", s.budget.Deadline().Format(time.RFC3339Nano))
			return
		case errors.Is(err, kube.ErrNotTerminating):
			if s.kubelet > 0 {
				changed := s.budget.Tighten(s.budget.Start().Add(s.kubelet))
				s.log.Warn("supervisor: the pod has no deletionTimestamp: the kubelet is terminating it on its own, with its grace (-kubelet-grace); the teardown follows it",
					"kubelet_grace", s.kubelet, "tightened", changed, "deadline", s.budget.Deadline().Format(time.RFC3339Nano))
				return
			}
			s.log.Info("supervisor: the pod has no deletionTimestamp (graceful node shutdown?): the budget stands; -kubelet-grace would give the kubelet's own grace")
			return
		case ctx.Err() != nil:
			return
		case forceDeleted(s.pod, err):
			changed := s.budget.Tighten(s.budget.Start().Add(deadline.MinimumGracePeriod))
			s.log.Warn("supervisor: the pod was removed from the API server at the SIGTERM during the daemon's teardown (a force deletion): the kubelet stops the container with its 2 s; the teardown follows",
				"error", err, "tightened", changed, "deadline", s.budget.Deadline().Format(time.RFC3339Nano))
			return
		case !warned:
			warned = true
			s.log.Warn("supervisor: the pod's deletion could not be read at the SIGTERM during the daemon's teardown: the budget stands until a read succeeds",
				"error", err, "read_again_every", podPoll)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(podPoll):
		}
	}
}

// forceDeleted reports whether err, a read of pod's deletion, says the pod
// was force-deleted (kubectl delete --force --grace-period=0): the API
// server has no pod of its name (404), or another pod (ErrPodReplaced),
// where a read found this one before (kube.Identity.Confirmed: a wrong -pod
// or -pod-uid reads so at every read). The kubelet then stops the
// container with its 2 s, as drain has it for a force deletion read before
// any deletion. Not for a static pod, whose mirror pod no deletion in the
// API server stops it through (kube.ErrStaticPod).
func forceDeleted(pod *kube.Pod, err error) bool {
	id := pod.Identity()
	return (kube.IsNotFound(err) || errors.Is(err, kube.ErrPodReplaced)) && id.Confirmed && !id.Static
}

// podReadTimeout bounds each read of the pod's deletion (deletionAtSIGTERM),
// and podPoll is how often one that failed is tried again: drain's own.
const (
	podReadTimeout = 2 * time.Second
	podPoll        = time.Second
)

// stopServer is the server step: the final sweep (sweep.go: what runs
// again since the preserve phase is paused, within half the step's time),
// then SIGTERM, with what is left of the budget before the daemon's
// reserve; SIGKILL at the step's deadline, so the daemon still gets its
// turn. The sweep's account is the step's Detail, which drain merges into
// the preserve phase's; sandboxes the sweep could not pause fail the step.
//
// A server that exited on its own before its SIGTERM took its sandboxes
// with it: the ones its last listing showed that no Run of the preserve
// phase accounted for are the step's Detail instead, lost (lostWithServer
// in exited.go), so that drain's Report, log line, DrainFinished and
// Report.Err count them as the supervisor's Report does.
func (s *supervisor) stopServer(ctx context.Context) (any, error) {
	swept, err := s.beforeSIGTERM(ctx)
	swept, lostErr := s.lostBeforeSIGTERM(swept)
	err = errors.Join(err, lostErr)
	s.termSent.Store(true)
	if dl, ok := ctx.Deadline(); ok {
		s.log.Info("supervisor: SIGTERM to the server", "time_left", time.Until(dl).Round(time.Millisecond))
	}
	err = errors.Join(err, s.server.stop(ctx, killWait))
	if swept == nil {
		return nil, err // no Detail, not a nil *pause.Report in it
	}
	return swept, err
}

// killWait is how long the server step waits for the server's reap after the SIGKILL it
// sends at its deadline: less than drain's 100 ms between a step's context ending and its
// abandonment, which drops the step's Detail, the final sweep's account, from the Report.
// Waited 1 s, a server whose exit outlasted 100 ms (a VMM with much memory to free, a
// thread blocked on a device) made drain abandon the step, the sandboxes the sweep paused
// in no account (docs/faults.md row 793). One not reaped by then is the step's error; the
// daemon step's holder wait sees what it still holds, and the Report's state of it is read
// at the end.
const killWait = 50 * time.Millisecond

// beforeSIGTERM is what the server step does before the server's SIGTERM:
// the final sweep, then closing the idle connections of the API client.
// Nothing is asked of the server after its SIGTERM (AgentENV accepts no
// connection then), and a server whose graceful shutdown waits for its
// open connections would wait for ours, kept alive for a next request that
// never comes, until the step's SIGKILL.
func (s *supervisor) beforeSIGTERM(ctx context.Context) (*pause.Report, error) {
	swept, err := s.sweep(ctx)
	s.src.CloseIdleConnections()
	if l, ok := s.sweepList.(*notPaused); ok {
		l.closeIdleConnections()
	}
	return swept, err
}

func (s *supervisor) report(d *drain.Report, note string) *Report {
	s.procs.reap()
	rep := &Report{Drain: d, Server: s.server.state(), Note: note}
	if s.daemon != nil {
		st := s.daemon.state()
		rep.Daemon = &st
	}
	if s.owned != nil {
		rep.OwnedDaemon = s.owned.state()
	}
	rep.OrphansReaped = s.procs.orphanCount()
	rep.ExitCode = rep.Server.Code
	if !rep.Server.Exited {
		rep.ExitCode = 1
	}
	if d != nil && d.Preserve != nil && d.Preserve.Unknown {
		// No listing succeeded: whatever the server says, nothing is known
		// to be preserved.
		rep.Note = "no listing succeeded, the sandboxes are unknown: " + d.Preserve.ListErr
		s.log.Error("supervisor: "+rep.Note, "passes", d.Preserve.Passes)
		rep.ExitCode = max(rep.ExitCode, 1)
	}
	if d != nil && d.Preserve != nil && d.Preserve.Incomplete {
		// Every listing failed after its first page (a page 2's 503): the
		// ones listed are accounted for, and the sandboxes of the pages
		// not reached may have run to SIGKILL. No clean exit either.
		msg := "listing INCOMPLETE: no listing of the preserve phase was complete, sandboxes not listed may have run: " + d.Preserve.ListErr
		rep.addNote(msg)
		s.log.Error("supervisor: "+msg, "listed", len(d.Preserve.Entries), "passes", d.Preserve.Passes)
		rep.ExitCode = max(rep.ExitCode, 1)
	}
	if d != nil {
		// The daemon step's failure (a teardown that left devices, a daemon
		// killed or crashed) is no clean exit whatever the server says, as
		// drain.Report.Err has it for drain.Server.Run. The server step's
		// own failures already show in the server's status (or as lost).
		for _, p := range d.Phases {
			if p.Name == StepDaemon && (p.Result == drain.Failed || p.Result == drain.Abandoned || p.Result == drain.TimedOut) {
				s.daemonStepFailed(rep, p.Result, p.Error)
			}
		}
	}
	if f := s.sweepUnknown.Load(); f != nil && d != nil {
		// The final sweep could not list after the preserve phase, or not
		// completely (sweepAccount logged it at ERROR): a sandbox resumed
		// since that it did not reach runs into the server's SIGTERM, and
		// whatever the server says, it is not known preserved. No clean
		// exit, as for an incomplete preserve phase.
		rep.addNote(f.note)
		rep.ExitCode = max(rep.ExitCode, 1)
	}
	if d != nil { // drain merged the final sweep into d.Preserve: the account is of the end
		if n := d.Lost(); n > 0 && (d.Preserve == nil || !d.Preserve.Unknown) {
			// Whatever the server says, sandboxes will be lost at SIGKILL.
			lost := fmt.Sprintf("%d sandbox(es) not preserved", n)
			if d.Preserve != nil {
				lost += ": " + ids(d.Preserve.Entries, pause.Outcome.Lost)
			}
			rep.addNote(lost)
			s.log.Error("supervisor: " + lost)
			rep.ExitCode = max(rep.ExitCode, 1)
		}
	}
	if d != nil && d.PodMismatch != "" {
		// -pod or -pod-uid does not name this pod (drain.New said so at
		// start): no deletion of it could be read, whatever the server
		// says. No clean exit, as drain.Report.Err has it for sandboxd.
		rep.addNote("the pod's name does not name this pod (-pod or -pod-uid is wrong): " + d.PodMismatch)
		rep.ExitCode = max(rep.ExitCode, 1)
	}
	if msg := s.daemonLost.Load(); msg != nil {
		// The daemon exited before its teardown (daemonExited): whatever
		// the daemon step made of a daemon already gone, no clean exit.
		rep.addNote(*msg)
		rep.ExitCode = max(rep.ExitCode, 1)
	}
	s.lostWithServer(rep)
	return rep
}

// daemonStepFailed counts in rep a daemon step that ended with result
// (failed, timed out, abandoned) and the error msg, in a drain or after
// the server exited on its own: a device left live, the daemon left
// running, killed or crashed. It is no clean exit whatever the server's
// status: the note names it, the log says it at ERROR, and the exit status
// is 1 at least.
func (s *supervisor) daemonStepFailed(rep *Report, result drain.Result, msg string) {
	msg = fmt.Sprintf("%s step %s: %s", StepDaemon, result, msg)
	rep.addNote(msg)
	s.log.Error("supervisor: " + msg)
	rep.ExitCode = max(rep.ExitCode, 1)
}

// lostWithServer counts in rep the sandboxes lost with a server that
// exited on its own before its SIGTERM, during the drain or before any
// termination: the last listing's that the drain's account (if any) has no
// entry for (exited.go). A drain that left no account but counted them
// (Unaccounted) has them in its Lost already.
func (s *supervisor) lostWithServer(rep *Report) {
	d := rep.Drain
	if !(s.exitedDuring.Load() || s.exitedBefore.Load()) || (d != nil && d.Preserve == nil && d.Unaccounted > 0) {
		return
	}
	var acc *pause.Report
	if d != nil {
		acc = d.Preserve
	}
	last, incomplete := s.counted.lastListed()
	lost := append(lostByServerStep(acc), lostWithServer(last, acc)...)
	if len(lost) == 0 {
		return
	}
	rep.LostWithServer = lost
	msg := serverExitNote(s.exitedWhen(), rep.Server.String(), lost, incomplete)
	rep.addNote(msg)
	s.log.Error("supervisor: " + msg)
	rep.ExitCode = max(rep.ExitCode, 1)
}

// addNote adds msg to the Report's note, after what it says already.
func (r *Report) addNote(msg string) {
	r.Note = strings.TrimPrefix(r.Note+"; "+msg, "; ")
}

// Lost returns how many sandboxes the Report counts lost: the drain's, and
// the ones lost with a server that exited on its own that the drain's
// account has no entry for.
func (r *Report) Lost() int {
	n := r.lostOutsideDrain()
	if r.Drain != nil {
		n += r.Drain.Lost()
	}
	return n
}

// lostOutsideDrain is how many of LostWithServer the drain's account has
// no entry for (the server step gave it the others: exited.go).
func (r *Report) lostOutsideDrain() int {
	if r.Drain == nil || r.Drain.Preserve == nil {
		return len(r.LostWithServer)
	}
	n := 0
	for _, id := range r.LostWithServer {
		if !slices.ContainsFunc(r.Drain.Preserve.Entries, func(e pause.Entry) bool { return e.ID == id }) {
			n++
		}
	}
	return n
}

// finish writes the Report to -report (atomically and durably), then logs
// it and writes the termination message, so that both tell whether it was
// written. A Report that could not be written (a full disk, its volume
// gone) is no clean exit, as for sandboxd and gvisor-worker: the exit
// status is 1 at least, and the termination message says the full report
// could not be written, and why, where it would name the file; the file
// then holds nothing, not the previous shutdown's Report, which was read as
// this one's (writeReport; docs/faults.md row 1138). The log line says the
// daemon teardown's verdict, devices and note when it ran outside any drain
// (Report.Ublk), which no drain's line carries then.
func (s *supervisor) finish(rep *Report) {
	reportErr := s.writeReport(rep)
	if reportErr != nil {
		s.log.Error("supervisor: writing the report", "file", s.cfg.report, "err", reportErr)
		rep.ExitCode = max(rep.ExitCode, 1)
	}
	attrs := []any{"exit_code", rep.ExitCode, "server", rep.Server.String(), "orphans_reaped", rep.OrphansReaped}
	if rep.Daemon != nil {
		attrs = append(attrs, "daemon", rep.Daemon.String())
	}
	if rep.OwnedDaemon != nil {
		attrs = append(attrs, "owned_daemon_pid", rep.OwnedDaemon.Pid, "owned_daemon_exited", rep.OwnedDaemon.Exited)
	}
	if rep.Drain != nil || rep.LostWithServer != nil {
		attrs = append(attrs, "lost", rep.Lost())
	}
	if rep.Drain != nil {
		attrs = append(attrs, "headroom", rep.Drain.Headroom.Round(time.Millisecond))
	}
	if u := rep.Ublk; u != nil { // the teardown outside a drain: no drain step carries it
		attrs = append(attrs, "ublk_verdict", u.Verdict, "ublk_devices", len(u.Devices))
		if u.Note != "" {
			attrs = append(attrs, "ublk_note", u.Note)
		}
	}
	s.log.Info("supervisor: report", attrs...)
	s.writeTerminationMessage(rep, reportErr)
}

// writeReport writes rep to -report, if set, atomically and durably, by
// lastreport's rule: when it cannot (its file system full, or read-only),
// the Report an earlier shutdown left there is removed, where it stayed and
// was taken for this one's (docs/faults.md row 1138), this drain's account
// as it stood stays, unfinished (row 1611), and on a full file system this
// one is written once more in the space that freed.
func (s *supervisor) writeReport(rep *Report) error {
	if s.cfg.report == "" {
		return nil
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return s.progress.Finish(append(b, '\n'))
}

// hookRoutes serves the preStop hook on its own listener, guarded: only a
// request with the hook secret (or, with none, from loopback) may drain;
// any other is refused 403 and logged.
func (s *supervisor) hookRoutes() http.Handler {
	guard := &drain.HookGuard{Secret: s.cfg.hookSecret, Logger: s.log}
	mux := http.NewServeMux()
	mux.Handle("GET /drain", guard.Wrap(s.openHook(s.drainer.PreStop())))
	return mux
}

// openHook counts the preStop requests h serves while it serves them
// (hooksOpen): a SIGTERM that comes with one open tells that the kubelet
// gave up on the hook (sigtermDuringTeardown).
func (s *supervisor) openHook(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hooksOpen.Add(1)
		defer s.hooksOpen.Add(-1)
		h.ServeHTTP(w, r)
	})
}

// routes serves readiness and liveness.
func (s *supervisor) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /readyz", s.drainer.Gate().Readiness(http.HandlerFunc(s.ready)))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("GET /metrics", s.metrics)
	return mux
}

// readyTimeout is how long /readyz waits for the server's listing before it
// answers 503 with the listing's error. A readiness probe must wait longer
// (the manifests' timeoutSeconds: 3): at Kubernetes' default of 1 s the
// kubelet cut a listing between the two, the pod NotReady for a reason
// neither the probe's record nor the supervisor's log gave (docs/faults.md
// row 962).
const readyTimeout = 2 * time.Second

// A readyCut is the cause of a readiness listing readyTimeout cut, which
// httpsource's error names ("no answer before its context ended (...)"):
// "context deadline exceeded" alone did not tell the operator reading why
// the pod is not Ready that limit from the server's, a proxy's or the
// probe's (docs/faults.md row 1982). It is a deadline, as the cut is.
type readyCut struct{}

func (readyCut) Error() string {
	return fmt.Sprintf("/readyz's %v limit on the server's listing", readyTimeout)
}
func (readyCut) Unwrap() error { return context.DeadlineExceeded }

// errProbeGaveUp is the cause of a readiness listing cut because the
// probe that asked for it closed its connection: the kubelet's probe
// timeout (timeoutSeconds, 1 s unless set) ended first. Said as "its
// context ended" alone, or not at all, it could not be told from the
// server's failure, and a pod whose probes all ended so never turned
// Ready with no line saying why (docs/faults.md row 2162).
var errProbeGaveUp = errors.New("the readiness probe gave up: its connection closed before the server's listing answered")

// probeContext returns the context of the listing a probe's request
// context req asks for: ended, when req ends, with errProbeGaveUp as its
// cause, which httpsource's error names and recorder tells from a
// listing's own failure. The request's own cancellation carries no cause.
func probeContext(req context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(req))
	stop := context.AfterFunc(req, func() { cancel(errProbeGaveUp) })
	return ctx, func() { stop(); cancel(nil) }
}

// ready answers 200 when the server answers its list within readyTimeout,
// 503 otherwise.
func (s *supervisor) ready(w http.ResponseWriter, r *http.Request) {
	if msg := s.daemonLost.Load(); msg != nil {
		http.Error(w, *msg, http.StatusServiceUnavailable)
		return
	}
	start := time.Now()
	probe, ended := probeContext(r.Context())
	defer ended()
	ctx, cancel := context.WithTimeoutCause(probe, readyTimeout, readyCut{})
	defer cancel()
	if _, err := s.counted.RunningIDs(ctx); err != nil {
		switch {
		case s.logKeyRefused(err):
		case errors.Is(context.Cause(ctx), errProbeGaveUp):
			s.logProbeGaveUp(err, time.Since(start))
		default:
			s.logNotReady(err)
		}
		http.Error(w, "server not answering: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	s.probeGaveUp.OK()
	if s.keyRefused.OK() > 0 {
		s.log.Info("supervisor: the server accepts the API key again: readiness lists its sandboxes")
	}
	if n := s.notReady.OK(); n > 0 {
		s.log.Info("supervisor: the server's listing answers again: ready", "failures", n)
	}
	fmt.Fprintln(w, "ok")
}

// logNotReady logs at Warn a readiness listing that failed other than by a
// refused key (logKeyRefused), once per failure until a listing succeeds:
// the kubelet keeps no body of a failed HTTP probe ("HTTP probe failed with
// statuscode: 503"), so a server whose listing answers 500, a -server-url
// on the wrong port or an API shape the server does not speak shows as a
// pod that never turns Ready, its reason in no Event and no other log line
// (docs/faults.md row 1184). A failure with a status is told apart by it,
// one with none (no answer, an answer the shape cannot read) by its text.
func (s *supervisor) logNotReady(err error) {
	what := err.Error()
	var se *httpsource.StatusError
	if errors.As(err, &se) {
		what = strconv.Itoa(se.StatusCode)
	}
	if news, n := s.notReady.Fail(what); news {
		s.log.Warn("supervisor: the server's listing failed: not ready (/readyz 503) until it answers (logged once per failure)",
			"err", err, "failures", n)
	}
}

// logProbeGaveUp logs at Warn a readiness listing err that the probe's
// end cut after waited, once until a probe gets its answer: not the
// server's failure (logNotReady's), but a probe whose timeout is shorter
// than the server's listing, which the kubelet counts failed.
func (s *supervisor) logProbeGaveUp(err error, waited time.Duration) {
	if news, _ := s.probeGaveUp.Fail("gave up"); news {
		s.log.Warn(fmt.Sprintf("supervisor: the readiness probe gave up before the server's listing answered: not ready by the kubelet's count, "+
			"not a failure of the server's; set the probe's timeoutSeconds above /readyz's %v limit (logged once until a probe gets its answer)", readyTimeout),
			"waited", waited, "err", err)
	}
}

// logKeyRefused logs at Warn a listing the server answered 401 or 403,
// naming the header and where the key came from, once per status until a
// listing succeeds: the kubelet probes every few seconds, and a mistyped
// key otherwise shows only as a pod that never turns Ready, the status in
// a probe's body that the kubelet keeps (docs/faults.md row 230). It
// reports whether err was such a refusal.
func (s *supervisor) logKeyRefused(err error) bool {
	var se *httpsource.StatusError
	if !errors.As(err, &se) || (se.StatusCode != http.StatusUnauthorized && se.StatusCode != http.StatusForbidden) {
		return false
	}
	if news, _ := s.keyRefused.Fail(strconv.Itoa(se.StatusCode)); !news {
		return true
	}
	s.log.Warn("supervisor: the server refused the API key: not ready until it accepts one (logged once)",
		"status", se.StatusCode, "header", "X-API-Key", "key_from", s.cfg.api.KeySource(), "err", err)
	return true
}

// spared reports whether killTree must leave pid alone: the server's own
// device daemon, which only its teardown step may stop (a kill with live
// devices can hang the kernel).
func (s *supervisor) spared(pid int) bool {
	return s.owned != nil && pid == s.owned.pidOrZero()
}

// writeTerminationMessage writes the termination's summary to the
// termination message path, so the pod's last state says what happened
// (at most 4 KiB; the full Report is in -report, unless reportErr, the
// error of writing it, which the summary gives instead). A daemon teardown
// outside any drain (Report.Ublk) has its line after the server's, as a
// drain's daemon step has in the drain's summary. A failure is logged.
func (s *supervisor) writeTerminationMessage(rep *Report, reportErr error) {
	extra := []string{fmt.Sprintf("server %s; supervisor exit code %d", rep.Server.String(), rep.ExitCode)}
	if line := termmsg.UblkLine(rep.Ublk); line != "" { // before the note, which is not bounded
		extra = append(extra, line)
	}
	if rep.Note != "" {
		extra = append(extra, "note: "+rep.Note)
	}
	if reportErr != nil || s.cfg.report != "" {
		extra = append(extra, termmsg.ReportLine(s.cfg.report, reportErr))
	}
	path, explicit := termmsg.Path(s.cfg.termLog)
	var sweep string
	if f := s.sweepUnknown.Load(); f != nil && rep.Drain != nil {
		sweep = f.verdict
	}
	wrote, err := termmsg.Write(path, explicit, summary(rep, s.exitedBefore.Load(), sweep, extra))
	switch {
	case err != nil:
		s.log.Warn("supervisor: termination message not written", "err", err)
	case wrote:
		s.log.Info("supervisor: termination message written", "file", path)
	}
}

// summary is the termination message of rep: termmsg's summary of the
// drain, its first line (the verdict) counting too the sandboxes lost with
// a server that exited on its own (before any termination when before)
// that the drain's account has no entry for, as the exit status does, and
// saying, after the drain's account, what the final sweep could not list
// (sweep: its verdict, "" when it listed all), which drain's account does
// not: "all 20 sandboxes preserved" alone would read as a clean drain. The
// verdict is rewritten before termmsg lays the message out, so that it
// still fits the kubelet's read and says its own length (row 1961).
func summary(rep *Report, before bool, sweep string, extra []string) string {
	n := rep.lostOutsideDrain()
	verdict := func(first string) string {
		if sweep != "" {
			if account, after, ok := strings.Cut(first, "; "); ok {
				first = account + "; " + sweep + "; " + after
			} else {
				first += "; " + sweep
			}
		}
		if n == 0 {
			return first
		}
		line := fmt.Sprintf("drainkit: %d sandboxes LOST with the server, which exited on its own", n)
		switch {
		case before:
			return line + " before termination (no drain ran)"
		case rep.Drain == nil:
			return line + " during the drain before SIGTERM (no drain report)"
		}
		return line + " during the drain; " + strings.TrimPrefix(first, "drainkit: ")
	}
	return termmsg.SummaryWith(rep.Drain, verdict, extra...)
}
