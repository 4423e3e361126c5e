package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/examples/internal/daemonhold"
	"github.com/drainkit/drainkit/examples/internal/podstart"
	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/examples/internal/store"
	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/kubeletconf"
	"github.com/drainkit/drainkit/internal/lastreport"
	"github.com/drainkit/drainkit/internal/learned"
	"github.com/drainkit/drainkit/internal/promexport"
	"github.com/drainkit/drainkit/internal/runsc"
	"github.com/drainkit/drainkit/internal/startsig"
	"github.com/drainkit/drainkit/internal/statedir"
	"github.com/drainkit/drainkit/internal/termmsg"
	"github.com/drainkit/drainkit/internal/ublkhook"
	"github.com/drainkit/drainkit/internal/ublkstep"
	"github.com/drainkit/drainkit/kube"
	"github.com/drainkit/drainkit/pause"
	"github.com/drainkit/drainkit/ublk"
)

// ReportFile is the file in the state directory that the shutdown Report is written to.
const ReportFile = "last-shutdown.json"

// A Server is one sandboxd process: the sandboxes, the HTTP API and the Drainer.
type Server struct {
	cfg      Config
	logger   *slog.Logger
	node     *sandbox.Node
	rt       sandbox.Runtime
	drainer  *drain.Drainer
	progress *lastreport.Progress // this drain's account while it runs
	budget   *deadline.Budget
	http     *http.Server
	ln       net.Listener
	hook     *http.Server // the preStop hook, on its own listener
	hookLn   net.Listener
	daemon   *fakeublk.Child
	// signals holds the SIGTERM and SIGINT from New's first moment until Close: one
	// that comes while sandboxd starts (its lock, its device daemon) drains once it has.
	signals *startsig.Catcher
	// lock makes the state directory this process's alone until Close.
	lock *statedir.Lock
	// est estimates one preserve; it starts from STATE_DIR/learned-rates.json
	// when an earlier shutdown wrote one, and is saved there at shutdown.
	est *deadline.Estimator
	// learned is the start from what the last shutdown learned, and saves what
	// this one learns.
	learned *learned.Start
	steps   []drain.Step
	// meters feeds GET /metrics: the OpenTelemetry metrics in Prometheus's format.
	meters  *sdkmetric.MeterProvider
	metrics http.Handler
	ublk    *ublkstep.Teardown // nil without devices
	// ublkRep is the ublk step's account of the last drain (Run), nil before one: Close
	// does not exit while the daemon may serve a device it left live (holdWhileDaemonServes).
	ublkRep *ublk.Report
	// daemonAsked is set once the ublk step runs: the daemon's exit from then on is the
	// teardown's to judge. daemonLost is why the daemon is gone when it exited before
	// (watchDaemon): /readyz answers 503 with it.
	daemonAsked atomic.Bool
	daemonLost  atomic.Pointer[string]
	// Problems are the records found damaged at start and not loaded.
	Problems []store.Problem
}

// New builds the server: it loads the paused sandboxes, starts the fake device daemon in
// fake mode, builds the Drainer and listens. Bad configuration fails here, naming the flag
// or the field. The process that calls New must call fakeublk.MainIfDaemon first thing in
// main. Call Run next, or Close if Run is never called.
//
// From its first moment New holds SIGTERM and SIGINT (and keeps SIGHUP and SIGQUIT from
// ending the process) until Close. One that comes while New waits for the state
// directory's lock ends the wait: New fails, having touched nothing. One that comes after
// (the device daemon starting, the sandboxes loading) lets New finish; Run then drains
// at once, the kubelet's SIGKILL counted from the signal.
func New(ctx context.Context, cfg Config, logger *slog.Logger) (*Server, error) {
	return newServer(ctx, cfg, logger, false)
}

// newServer is New; with exits (Main's, whose process exits once Run or New returns)
// SIGTERM stays caught from the Catcher's start until the process exits
// (startsig.KeepUntilExit): Close stops the Catcher, and a SIGTERM between that and the exit (the kubelet's again:
// a restarted kubelet, a runtime that sends the stop signal with every stop request) had
// its default action, status 143 where the drain went well, and after a New that failed,
// while Main wrote the termination message, no message (docs/faults.md row 1112). Not
// before the Catcher: a SIGTERM then must end the process, not be dropped, as no drain
// would follow it.
func newServer(ctx context.Context, cfg Config, logger *slog.Logger, exits bool) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, logger: logger, signals: startsig.Catch(logger, "sandboxd")}
	if exits {
		startsig.KeepUntilExit()
	}
	if err := s.open(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Server) open(ctx context.Context) (err error) {
	// The lock before anything else in the directory: a sandboxd started while the one
	// before it still drains into the directory (a rolling update with maxSurge, a pod
	// started before the last one has ended) waits here, saying for whom, not ready and
	// with nothing touched, until that one exits; then it takes over what it left. Its own
	// SIGTERM while it waits ends the wait: New fails and Main exits 1.
	lockCtx, unlock := s.signals.Context(ctx)
	s.lock, err = statedir.Acquire(lockCtx, s.cfg.StateDir, statedir.Config{Owner: s.cfg.Pod, Logger: s.logger})
	unlock()
	if errors.As(err, new(syscall.Errno)) {
		// What the machine refused of the flag's path is named after the flag, as every
		// other start failure: statedir's "state directory: lstat ...: not a directory" (a
		// -state-dir under a file, a read-only mount) named none (docs/faults.md row
		// 1243). A wait a SIGTERM ended names the holder, not a bad value.
		return fmt.Errorf("-state-dir: %w", err)
	}
	if err != nil {
		return err
	}
	// Owner-only: records and images are the sandboxes' state, and the device daemon's
	// socket lives here too.
	if err := os.Chmod(s.cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("-state-dir: %w", err)
	}
	// A Report write an earlier server's SIGKILL cut short left its temporary file, which
	// no later write reuses; under the lock no other server writes the Report.
	s.lock.RemoveTemps(ReportFile, s.logger)
	st, err := store.Open(filepath.Join(s.cfg.StateDir, "records"))
	if err != nil {
		return err
	}
	if s.rt, err = sandbox.NewRuntime(s.cfg.Runtime, s.cfg.StateDir, s.cfg.PauseLatency, s.cfg.PauseJitter); err != nil {
		return fmt.Errorf("-runtime %s: %w", s.cfg.Runtime, err)
	}
	if f, ok := s.rt.(*sandbox.Fake); ok {
		f.SharePauses(s.cfg.PauseShare)
	}
	if s.node, s.Problems, err = sandbox.NewNode(s.rt, st, s.logger); err != nil {
		return err
	}
	// What a pause cut by the last server's SIGKILL left (its image, which no record
	// names), and the bundles of sandboxes lost running: under the lock, before any create.
	s.node.SweepOrphans(filepath.Join(s.cfg.StateDir, "records"), s.logger)
	if s.cfg.IDSeed != 0 {
		s.node.SeedIDs(s.cfg.IDSeed)
	}
	if s.meters, s.metrics, err = promexport.New(); err != nil {
		return err
	}
	// The budget before the steps, whose reserves follow the grace it says the kubelet uses.
	if s.budget, err = deadline.New(s.cfg.Grace, deadline.Config{}); err != nil { // the margin scales with the grace
		return fmt.Errorf("-grace: %w", err)
	}
	steps, err := s.teardownSteps(ctx)
	if err != nil {
		return err
	}
	startingHook()
	s.steps = steps
	if err := s.buildDrainer(s.sizedByGrace(steps)); err != nil {
		return err
	}
	s.http.Handler = s.routes()
	if s.ln, err = net.Listen("tcp", s.cfg.Listen); err != nil {
		return fmt.Errorf("-listen: %w", err)
	}
	s.hook = &http.Server{Handler: s.hookRoutes(), ReadHeaderTimeout: 10 * time.Second}
	if s.hookLn, err = net.Listen("tcp", s.cfg.HookListen); err != nil {
		return fmt.Errorf("-hook-listen: %w", err)
	}
	return nil
}

// teardownSteps starts the fake device daemon (fake mode with devices) and returns the
// steps after preservation: the ublk teardown, then the HTTP server.
func (s *Server) teardownSteps(ctx context.Context) ([]drain.Step, error) {
	s.http = &http.Server{ReadHeaderTimeout: 10 * time.Second} // Handler: once the Drainer exists
	httpStep := drain.HTTPServerStep("http", s.http, s.cfg.HTTPReserve())
	if s.cfg.Devices == 0 {
		return []drain.Step{httpStep}, nil
	}
	procfs := filepath.Join(s.cfg.StateDir, "proc") // see ublkhook.Set below
	if err := os.MkdirAll(procfs, 0o700); err != nil {
		return nil, err
	}
	daemon, sock, err := StartDeviceDaemon(ctx, s.cfg.StateDir, s.cfg.Devices)
	if err != nil {
		return nil, err
	}
	s.daemon = daemon
	// The last resort is on (ublk's default): on a kernel not known fixed, a VMM of this
	// pod still holding a disk when only the step's reserve is left is killed (the pod's
	// SIGKILL would end it anyway) so the daemon can stop its devices and exit first.
	cfg := ublk.Config{NoControl: true, Logger: s.logger, MeterProvider: s.meters}
	// The fake devices' sysfs, and an empty procfs for the holders scan: no process can
	// hold a fake device, and a scan of the machine's /proc, which the step makes before
	// it asks the daemon to stop, costs what everything else running there costs (0.1 s
	// on an idle machine, past a second on a loaded one), more than the reserve a short
	// grace period gives the step.
	hooks := ublkhook.Hooks{SysfsRoot: sysRoot(s.cfg.StateDir), ProcfsRoot: procfs}
	ublkHook(&hooks)
	ublkhook.Set(&cfg, hooks)
	// The step's reserve follows the grace in use, in the plan and inside the step, where
	// the teardown lays its stages out from it: see ublkstep. sock is given as it is: ublk
	// reads the daemon's process by its type (a *ublk.Socket's Process), and ublkstep sees
	// the stop request through ublk's hook, so that a shorter deletion read once the step
	// runs (with no sandbox it starts at SIGTERM, before that read answers) leaves the
	// holder wait going on (docs/faults.md row 1121).
	td, err := ublkstep.New(sock, cfg, func() time.Duration { return ublkReserve(s.budget.GraceInUse()) })
	if err != nil {
		return nil, err
	}
	s.ublk = td
	return []drain.Step{td, httpStep}, nil // td's phase is critical: nothing before it spends its reserve
}

// kubeletGrace is -kubelet-grace, or what -kubelet-config gives this pod; zero, logged,
// without the pod.
func (s *Server) kubeletGrace(pod *kube.Pod) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // the pod's priority
	defer cancel()
	set := kubeletconf.Setting{GraceName: "-kubelet-grace", ConfigName: "-kubelet-config", Grace: s.cfg.KubeletGrace, Config: s.cfg.KubeletConfig}
	return set.Resolve(ctx, pod, s.logger, "(-pod): only its missing deletionTimestamp tells the kubelet's own termination from a deletion")
}

func (s *Server) buildDrainer(steps []drain.Step) error {
	budget := s.budget
	pod := s.pod()
	kubeletGrace, err := s.kubeletGrace(pod)
	if err != nil {
		return err
	}
	build := func(pc pause.Config) error {
		s.est = pc.Estimator
		pc.Permanent = diskBroken // retrying cannot help: do not burn the window
		cfg := drain.Config{
			Budget:        budget,
			Gate:          &drain.Gate{Exempt: []drain.Class{drain.Pause, drain.Delete}},
			Sandboxes:     pause.ListFunc(s.node.Running),
			Pause:         pc,
			Steps:         steps,
			PollInterval:  min(time.Second, s.cfg.Grace/20),
			Logger:        s.logger,
			MeterProvider: s.meters,
			Pod:           pod,
			KubeletGrace:  kubeletGrace,
		}
		// This drain's account from its start, so that a SIGKILL mid-drain leaves it,
		// unfinished, rather than an earlier drain's Report (docs/faults.md row 1510).
		s.progress = lastreport.Follow(&cfg, filepath.Join(s.cfg.StateDir, ReportFile), 0o600, s.logger,
			lastreport.ByState(s.node.Count, sandbox.Running, sandbox.Pausing, sandbox.Paused, sandbox.Died, sandbox.Lost))
		s.drainer, err = drain.New(cfg)
		return err
	}
	// From what the last shutdown learned: the estimate of a pause and, adaptive, the
	// level its first epoch checks against that estimate.
	s.learned = learned.Server{Dir: s.cfg.StateDir, Concurrency: s.cfg.Concurrency, Ceiling: MaxConcurrency,
		Prior: s.cfg.PauseEstimate(), Budget: s.budget, KubeletGrace: kubeletGrace, Logger: s.logger}.Start()
	err = build(s.learned.Config())
	if err != nil {
		// What was learned is a prior, never a reason not to start: when one round of the
		// learned estimate no longer fits the grace (the last shutdown's pauses took most
		// of its window, or the grace was shortened since), failing here would fail every
		// start, the file being rewritten only at a shutdown, and serve none of the
		// sandboxes until it was removed by hand.
		if cold, ok := s.learned.Cold(err); ok {
			err = build(cold)
		}
	}
	if err != nil { // the flags' plan does not fit: name the flags, not drain's Config
		return usageError{fmt.Errorf("-grace %v is too short for one round of pauses of -pause-latency %v and the steps' reserves: %w",
			s.cfg.Grace, s.cfg.PauseLatency, err)}
	}
	return nil
}

// sizedByGrace returns the teardown steps with their reserves sized from the grace in use
// (UblkReserve, HTTPReserve), evaluated whenever the plan reads them: kubectl delete
// --grace-period=30 of a sandboxd whose -grace is an hour gives them the reserves of a
// 30 s sandboxd. Sized from -grace, the ublk step, critical, would keep its 30 s and take
// all the 25 s the margin leaves, the preserve phase none. steps is what teardownSteps
// returned: the ublk step (if any), whose stages inside its window follow the same reserve
// (ublkstep), then the HTTP step.
func (s *Server) sizedByGrace(steps []drain.Step) []drain.Step {
	out := make([]drain.Step, len(steps))
	for i, step := range steps {
		reserve := func() time.Duration { return httpReserve(s.budget.GraceInUse()) }
		var starting func()
		if t, ok := step.(*ublkstep.Teardown); ok {
			// the one its stages follow: UblkReserve of the grace in use (teardownSteps)
			reserve = t.Phase().Reserve
			starting = func() { s.daemonAsked.Store(true) } // it asks the daemon to stop
		}
		out[i] = reserveFollowsGrace{Step: step, reserve: reserve, starting: starting}
	}
	return out
}

// reserveFollowsGrace is a Step whose phase has reserve as its Reserve, the rest of the
// phase (its name, Critical) the Step's own.
type reserveFollowsGrace struct {
	drain.Step
	reserve  deadline.Reserve
	starting func() // called as Run begins, when not nil
}

// Run is the Step's own, after starting.
func (r reserveFollowsGrace) Run(ctx context.Context) (any, error) {
	if r.starting != nil {
		r.starting()
	}
	return r.Step.Run(ctx)
}

func (r reserveFollowsGrace) Phase() deadline.Phase {
	ph := r.Step.Phase()
	ph.Reserve = r.reserve
	return ph
}

// Tighten is the Step's own, when it has one (the ublk teardown's): drain calls it when its
// budget moves SIGKILL earlier while the step runs, or Force leaves the step its reserve,
// and the teardown lays its stages (the kill of a hung daemon, the last resort) out again
// before the new deadline. The embedded drain.Step gives only Phase and Run: without this
// method the wrapper hid the teardown's Tighten, which was cancelled at the new deadline
// with those stages still laid out in the old window, never run (docs/faults.md row 791).
// It reports whether the Step moved anything; false for a Step without one.
func (r reserveFollowsGrace) Tighten(dl time.Time) bool {
	t, ok := r.Step.(interface{ Tighten(time.Time) bool })
	return ok && t.Tighten(dl)
}

// usageError is New's error when the flags, valid one by one, make no plan that fits:
// Main exits 2, as for bad usage.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// pod is this pod in the Kubernetes API (-pod), or nil when there is none or no service
// account is mounted: the drain then goes on with -grace and posts no Events.
func (s *Server) pod() *kube.Pod {
	if s.cfg.Pod == "" {
		return nil
	}
	cfg := inCluster()
	cfg.Logger, cfg.MeterProvider, cfg.UID = s.logger, s.meters, s.cfg.PodUID
	pod, err := kube.New(s.cfg.Pod, cfg)
	if err != nil {
		s.logger.Warn("no Kubernetes API access: -grace stands, no Events", "error", err)
		return nil
	}
	podstart.Read(pod, s.logger) // before drain.New: a POD_NAME or POD_UID not naming the pod is said at start
	return pod
}

// startingHook is a test's: it holds New once the device daemon runs, for a SIGTERM then.
var startingHook = func() {}

// ublkHook is a test's: it changes the ublk step's hooks (a pretended kernel release).
var ublkHook = func(*ublkhook.Hooks) {}

// inCluster is the kube.Config of the pod sandboxd runs in (the zero one:
// the service account's); tests point it at an API server of their own.
var inCluster = func() kube.Config { return kube.Config{} }

// Addr returns the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// HookAddr returns the address the preStop hook listens on.
func (s *Server) HookAddr() string { return s.hookLn.Addr().String() }

// Node returns the server's sandboxes.
func (s *Server) Node() *sandbox.Node { return s.node }

// Drainer returns the server's Drainer.
func (s *Server) Drainer() *drain.Drainer { return s.drainer }

// Run serves HTTP until the first SIGTERM or SIGINT (or ctx ending, or the API's serving
// stopping: below), then shuts the node down with the Drainer — drain, preserve, ublk
// teardown, HTTP shutdown, all inside the grace period — writes the Report to
// STATE_DIR/last-shutdown.json and returns it. A SIGINT after the first signal forces the
// shutdown; a SIGTERM again does not (drain.Drainer.ServeSignals). Run never exits the
// process.
//
// Serving that stops on its own (a listener's Accept failing for good) is logged at Error
// when it stops and makes Run's error non-nil, as drain.Server.Run's exit status 1. When
// the API stops, Run drains at once, as at SIGTERM: a node no client nor readiness probe
// can reach is of no use, and its sandboxes are preserved while the process still holds
// them. When the preStop hook stops, Run goes on serving the API and drains at SIGTERM
// (the kubelet's preStop call fails and it sends SIGTERM at once). Once the drain is done
// the hook stops, before the termination message is written: a failure of either's
// serving is in the message, as in Run's error. So is a device daemon that ended on its
// own before the drain's ublk step asked it to stop (watchDaemon). Run's error also says when the Report
// could not be written.
func (s *Server) Run(ctx context.Context) (*drain.Report, error) {
	// The signals have been held since New began (s.signals): requests waiting in the
	// listener's queue are answered the moment serving starts, and a SIGTERM that came after
	// such an answer (the kubelet's, just after a probe passed), or while sandboxd started,
	// found its default action, which killed sandboxd at once, with no drain and no report
	// (docs/faults.md rows 238 and 241). SIGHUP and SIGQUIT are logged, and sandboxd goes on.
	ctx, drainNow := context.WithCancelCause(ctx) // the Drainer's Shutdown, its budget anchored then; the cause is the Report's
	defer drainNow(nil)
	apiErr := make(chan error, 1)
	go func() {
		err := s.serve("the API", s.http, s.ln, "draining now")
		if err != nil {
			drainNow(err)
		}
		apiErr <- err
	}()
	hookErr := make(chan error, 1)
	go func() {
		hookErr <- s.serve("the preStop hook", s.hook, s.hookLn, "the kubelet's preStop call fails, SIGTERM still drains")
	}()
	s.logger.Info("sandboxd serving", "addr", s.Addr(), "runtime", s.rt.Name(),
		"paused", s.node.Count(sandbox.Paused), "grace", s.cfg.Grace)
	lost := s.watchDaemon()
	s.progress.Start(s.drainer)
	rep := s.signals.Drain(ctx, s.drainer)
	s.progress.Stop() // the Report below is the last written
	stopped := lost() // the daemon's exit before the ublk step, if it did exit
	s.logLost(rep)
	stopped = errors.Join(stopped, <-apiErr) // the HTTP step shut the API down
	// The hook stops here, before the termination message, which must say every reason
	// the exit status is 1: left serving until Close, a failure of its serving after the
	// message was written made sandboxd exit 1 with a pod's last state that said nothing
	// of it (docs/faults.md row 261). Its preStop calls have their answers: the drain they
	// wait for is over. Close closes it again, to no effect; what closing it returns is the
	// listener's, and a failure of its serving is Serve's error, taken here.
	_ = s.hook.Close()
	stopped = errors.Join(stopped, <-hookErr)
	// The Report first: Close may take seconds (with runsc it force-deletes every sandbox
	// not preserved), and the drain left only its headroom before SIGKILL. The learned
	// rates after the Report and the termination message, which matter more: a Save held
	// up (its fsyncs behind the checkpoints' writeback) spent that headroom, and neither
	// was written (docs/faults.md row 364).
	err := s.writeReport(rep)
	s.writeTerminationMessage(rep, err, stopped)
	s.learned.Save(rep, s.drainer.Budget(), s.steps)
	if s.ublk != nil && rep != nil {
		if p := rep.Phase(s.ublk.Phase().Name); p != nil {
			s.ublkRep, _ = p.Detail.(*ublk.Report)
		}
	}
	s.Close()
	if err != nil {
		err = fmt.Errorf("writing the report: %w", err)
	}
	return rep, errors.Join(stopped, err)
}

// watchDaemon watches the device daemon (none without devices) until the function it
// returns is called, which returns an error saying how the daemon exited if it did before
// the ublk step asked it to stop. Such an exit (a crash, the OOM killer's SIGKILL) left
// the devices served by no one: it went unnoticed until the drain's ublk step said
// "orphaned", /readyz 200 and creates admitted meanwhile (docs/faults.md row 1018; the
// supervisor's row 964). It is an ERROR line the moment the daemon is reaped, and /readyz
// answers 503 naming it from then on; the server and its sandboxes run on until the
// drain preserves them.
func (s *Server) watchDaemon() (stop func() error) {
	if s.daemon == nil {
		return func() error { return nil }
	}
	halt := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-s.daemon.Done():
		case <-halt:
			return
		}
		if s.daemonAsked.Load() {
			return
		}
		why := "the device daemon ended (" + s.daemon.State() + ") on its own, before any teardown: its devices are not served"
		// The line first: whoever sees /readyz 503 finds its reason in the log. Once
		// the drain has begun (the gate closed) readiness is 503 already and no drain
		// is to come: the line says the one under way goes on.
		then := "not ready from now (/readyz 503); the sandboxes run on until the drain"
		if s.drainer.Gate().Closed() {
			then = "the drain under way goes on: the sandboxes are preserved, and its ublk step finds the daemon gone"
		}
		s.logger.Error("sandboxd: "+why+"; "+then, "daemon_pid", s.daemon.Pid())
		s.daemonLost.Store(&why)
	})
	return func() error {
		close(halt)
		wg.Wait()
		if why := s.daemonLost.Load(); why != nil {
			return errors.New(*why)
		}
		return nil
	}
}

// ready is /readyz's answer before the drain: 503 naming the device daemon once it is
// gone (watchDaemon), else 200 "ok".
func (s *Server) ready(w http.ResponseWriter, _ *http.Request) {
	if why := s.daemonLost.Load(); why != nil {
		http.Error(w, *why, http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = fmt.Fprintln(w, "ok")
}

// serve serves srv, what (the API or the preStop hook), on ln until srv shuts down or
// closes, and returns nil then; when serving stops otherwise, it logs that at Error, with
// then (what follows), and returns the error.
func (s *Server) serve(what string, srv *http.Server, ln net.Listener, then string) error {
	err := srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	s.logger.Error("serving "+what+" stopped: "+then+"; sandboxd will exit 1", "addr", ln.Addr().String(), "error", err)
	return fmt.Errorf("serving %s stopped: %w", what, err)
}

// writeTerminationMessage writes the drain's summary to the termination message path, so
// the pod's last state says what happened (at most 4 KiB; the full Report is in the state
// directory). A failure is logged: it must not change the exit.
func (s *Server) writeTerminationMessage(rep *drain.Report, reportErr, stopped error) {
	extra := termmsg.ServerLines("sandboxd", stopped, filepath.Join(s.cfg.StateDir, ReportFile), reportErr)
	path, explicit := termmsg.Path(s.cfg.TerminationLog)
	wrote, err := termmsg.Write(path, explicit, termmsg.Summary(rep, extra...))
	switch {
	case err != nil:
		s.logger.Warn("termination message not written", "error", err)
	case wrote:
		s.logger.Info("termination message written", "file", path)
	}
}

// Close releases what New started: the timeout timers, the listener, in runsc mode the
// sandboxes that were not preserved (they are lost either way; in a pod the container's
// SIGKILL takes them; one whose delete fails is an ERROR line naming it), the device
// daemon (asked to stop by the ublk step's Teardown, within the step's reserve, when no
// drain ran that step, as when New fails after starting it; killed if it still runs then,
// unless the rule below keeps it), the state directory's lock, which lets a sandboxd
// waiting for the directory in, and last the signals New began to hold (Main's server
// keeps SIGTERM caught after that, until the process exits: newServer).
//
// After Run, or that stop, when the ublk step left the daemon possibly serving a live
// device (a device left live or held, or what else it serves not known:
// ublk.DaemonReport.CannotTell) on a kernel where killing it then may crash the host,
// Close does not kill it: it says so at
// ERROR and waits for the daemon's exit, unbounded, still holding the lock and the
// signals; the pod's SIGKILL (the kubelet's at the grace's end) ends the wait with the
// process (examples/internal/daemonhold).
func (s *Server) Close() {
	defer s.signals.Stop() // last: until the process exits, a SIGTERM must not end it half-way
	defer s.lock.Release()
	defer s.learned.Close() // a server closed without its Save: the rates file's lock too
	if s.node != nil {
		s.node.Close()
	}
	if s.ln != nil {
		s.ln.Close()
	}
	if s.hook != nil {
		s.hook.Close() // a preStop call still waiting has its answer by now: the wait ended
	}
	if s.hookLn != nil {
		s.hookLn.Close()
	}
	if r, ok := s.rt.(*sandbox.Runsc); ok {
		var left []string
		for _, info := range s.node.List() {
			if info.State != sandbox.Paused {
				left = append(left, info.ID)
			}
		}
		if len(left) > 0 {
			s.logger.Warn("deleting the sandboxes not preserved", "ids", left)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, id := range left {
			// One that is not deleted may run on, past this process, with no one to list it.
			if err := r.Runtime.Delete(ctx, id, true); err != nil && !errors.Is(err, runsc.ErrNotExist) {
				s.logger.Error("sandbox not preserved and not deleted: it may run on", "id", id, "error", err)
			}
		}
	}
	if s.daemon != nil {
		s.stopDaemon()
		s.holdWhileDaemonServes()
		s.daemon.Close()
	}
}

// stopDaemon asks the device daemon to stop, as the drain's ublk step does, when no drain
// ran that step (New failed after the daemon started: a plan that does not fit -grace, a
// -hook-listen that cannot listen; or Run was never called): Close's kill of a daemon
// with its devices live is the kill the step refuses on a kernel not known fixed. The
// step's Teardown runs within its reserve (UblkReserve), and its account is ublkRep, so
// that holdWhileDaemonServes keeps to the same rule as after a drain.
func (s *Server) stopDaemon() {
	if s.ublkRep != nil || s.ublk == nil {
		return
	}
	select {
	case <-s.daemon.Done():
		return
	default:
	}
	s.logger.Info("stopping the device daemon: no drain ran the ublk step", "daemon_pid", s.daemon.Pid())
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.UblkReserve())
	defer cancel()
	rep, err := s.ublk.Stop(ctx)
	s.ublkRep = rep
	if err != nil {
		s.logger.Error("the device daemon did not stop cleanly", "error", err)
	}
}

// holdWhileDaemonServes waits for the device daemon's exit when the ublk step's last
// account (ublkRep) left it possibly serving a live device on a kernel not known fixed:
// killing it then is the kill the step refused, which may crash the host, and the daemon
// dies with sandboxd anyway (Pdeathsig; as PID 1, with the namespace), so neither Close's
// kill nor sandboxd's exit may come first. The Report and the termination message are
// written by then (Run); the pod's SIGKILL ends the wait.
func (s *Server) holdWhileDaemonServes() {
	if !daemonhold.Needed(s.ublkRep) {
		return
	}
	d := s.daemon
	daemonhold.Wait(s.logger, "sandboxd", "the ublk step", s.ublkRep, d.Pid(), func(ctx context.Context) error {
		select {
		case <-d.Done():
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
}

// writeReport writes rep into the state directory, atomically and durably, by
// lastreport's rule: when it cannot (the state directory's file system full, or
// read-only), the Report an earlier shutdown left there is removed, not read as this
// one's (docs/faults.md row 1113), this drain's account as it stood stays, unfinished
// (row 1611), and on a full file system this one is written once more in the space that
// freed (row 1115).
func (s *Server) writeReport(rep *drain.Report) error {
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return s.progress.Finish(data)
}

// preserved counts the preserved sandboxes of a Preserver report (nil: none).
func preserved(rep *pause.Report) int {
	if rep == nil {
		return 0
	}
	return rep.Counts[pause.Preserved]
}

// logLost logs every sandbox that was not preserved, one line each, so that the
// per-sandbox account survives a Report that cannot be written; or, when the preserve
// phase left no account of them, how many the drain counted.
func (s *Server) logLost(rep *drain.Report) {
	if rep != nil && rep.Preserve == nil && rep.Unaccounted > 0 {
		attrs := []any{"count", rep.Unaccounted}
		if p := rep.Phase(drain.PhasePreserve); p != nil {
			attrs = append(attrs, "preserve", p.Result, "error", p.Error)
		}
		s.logger.Error("sandboxes unaccounted for: the preserve phase left no report", attrs...)
	}
	if rep == nil || rep.Preserve == nil {
		return
	}
	if rep.Preserve.Unknown {
		s.logger.Error("sandboxes unknown: no listing succeeded", "error", rep.Preserve.ListErr)
	}
	for _, e := range rep.Preserve.Entries {
		if e.Outcome == pause.Preserved || e.Outcome == pause.Vanished {
			continue
		}
		s.logger.Error("sandbox not preserved", "id", e.ID, "outcome", e.Outcome,
			"attempts", e.Attempts, "error", e.Error)
	}
}

// diskBroken reports a write error that no retry within a shutdown can fix: a read-only
// file system, or a path that is not a directory.
func diskBroken(err error) bool {
	return errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.ENOTDIR)
}
