package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/examples/internal/store"
	"github.com/drainkit/drainkit/examples/sandboxd/server"
	"github.com/drainkit/drainkit/internal/freeport"
	"github.com/drainkit/drainkit/internal/kubeletsim"
)

// The two ways a node can go through its termination.
const (
	modeSeed     = "seed"
	modeDrainkit = "drainkit"
)

// roleEnv makes this binary a server: sandboxd (drainkit) or the seed.
const roleEnv = "DRAINSIM_ROLE"

// options are drainsim's flags.
type options struct {
	N           int
	Pause       time.Duration
	Jitter      float64
	Grace       time.Duration
	Concurrency int
	Runtime     string
	SeedPoll    time.Duration // the seed's preStop loop polls this often (AgentENV: 3 s)
	// PauseShare is how many fake pauses run at full speed at once on the node, in both
	// servers (-pause-share): more in flight share that speed, as real pauses share the
	// node's disk. 0: each fake pause takes its own time however many run.
	PauseShare int
	// IDSeed is passed to both servers (-id-seed): the two runs create the same sandbox IDs,
	// and so, the fake runtime's latency following from the ID, pause the same sandboxes in
	// the same times. Random per drainsim run unless -id-seed is given.
	IDSeed uint64
	// Warm has drainkit's node drain once before the termination the table shows
	// (-warm): a first sandboxd drains its own sandboxes and learns the node's level
	// into its state directory, and a new sandboxd on that directory (a DaemonSet's
	// next pod on the node) gets opts.N running sandboxes, the seed's, and is
	// terminated as the seed is.
	Warm    bool
	Verbose bool // servers' logs to stderr
}

// result is one termination.
type result struct {
	Mode        string
	N           int
	Timeline    *kubeletsim.Timeline
	Preserved   int
	PausedAt    []time.Time
	DaemonClean bool
	// ExitErr is how the server exited when it exited by itself: nil for
	// status 0, else what Wait returned (exit status 1: a shutdown whose
	// Report has an error, sandboxes lost included, or a server that did
	// its work and then failed, e.g. to write its Report).
	ExitErr error
	Report  *drain.Report // drainkit only
	// Warm is, with -warm, the drain before this one on the node's state directory
	// and what its plan counted on from it; nil for a node's first drain.
	Warm *warmStart
}

// simulate starts a server of the given mode as a real child process, creates opts.N
// sandboxes, and has the kubelet simulator terminate it.
func simulate(ctx context.Context, opts options, mode string, stderr io.Writer) (*result, error) {
	nd, err := startNode(ctx, opts, mode, "", opts.N, stderr)
	if err != nil {
		return nil, err
	}
	defer nd.close()
	return terminate(ctx, opts, mode, nd)
}

// terminate has the kubelet simulator terminate nd's server and collects what its
// sandboxes, the ones nd created, came to.
func terminate(ctx context.Context, opts options, mode string, nd *node) (*result, error) {
	var hook kubeletsim.Hook = kubeletsim.HTTPGet{URL: "http://" + nd.hookAddr + "/drain"}
	if mode == modeSeed {
		hook = seedHook(nd.base, opts.SeedPoll)
	}
	tl, err := kubeletsim.Terminate(ctx, nd.child, hook, opts.Grace)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return nil, err
	}
	res, err := collect(mode, nd, tl)
	if err == nil && !tl.Killed {
		res.ExitErr = nd.child.Err()
	}
	return res, err
}

// preflight starts drainkit's server with opts and stops it once it serves, so that
// flags it refuses (a -pause whose one round does not fit -grace) fail drainsim at once
// with the server's reason, not after the seed's whole termination. The error of a
// server that refused its flags (exit status 2) is a usageError.
// It returns what the simulator could not make of the server's container (notAsInAPod).
func preflight(ctx context.Context, opts options, stderr io.Writer) (string, error) {
	nd, err := startNode(ctx, opts, modeDrainkit, "", 0, stderr)
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ExitCode() == 2 {
			return "", usageError{err}
		}
		return "", err
	}
	defer nd.close()
	return notAsInAPod(nd.child, opts.Runtime), nil
}

// notAsInAPod says, for the introduction, how the container kubeletsim gave a server
// here differs from a pod's, and what that leaves out; "" where it is a pod's: PID 1
// of a PID namespace of its own, in a cgroup of its own (as root). Asked of a server
// that runs, whose cgroup is still there.
func notAsInAPod(child *kubeletsim.Child, runtime string) string {
	var not, left []string
	if !child.PID1() {
		not = append(not, "not PID 1 of a PID namespace of their own")
		left = append(left, "a SIGTERM a server had no handler for would end it, where a pod's PID 1 gets no default action,\n"+
			"and its orphans go to this machine's init, not to it")
	}
	if child.Cgroup() == "" {
		not = append(not, "in no cgroup of their own")
		left = append(left, "the kubelet's SIGKILL takes their process group, not a container's cgroup:\n"+
			"a process that left the group would outlive it")
	}
	if len(not) == 0 {
		return ""
	}
	why := "this machine does not let drainsim make them"
	if os.Geteuid() != 0 {
		why = "drainsim is not run as root"
	}
	note := fmt.Sprintf("Not as a pod's container here (%s): the servers run as plain children,\n%s;\n%s.\n",
		why, strings.Join(not, ", "), strings.Join(left, ";\n"))
	if runtime == "fake" {
		note += "The fake runtime's processes (the server, its device daemon) stay in the group and handle\n" +
			"SIGTERM, so the figures below hold; "
	}
	return note + "run as root (sudo) for a pod's container.\n\n"
}

// usageError is a flag drainkit's server refused: drainsim exits 2 for it.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// A node is one server process with the sandboxes it created, in a state directory.
type node struct {
	dir, base, hookAddr string
	child               *kubeletsim.Child
	// created are the IDs of the sandboxes this server created: a state directory an
	// earlier server drained into holds that server's paused sandboxes too, which this
	// one loads as paused and which are not this termination's.
	created map[string]bool
	// eventsFrom is the size of the device daemon's event log when this server started:
	// what is past it is this server's daemon's (an earlier server's appended before).
	eventsFrom int64
	tail       *serverLog
	cleanup    []func() // in the order close runs them
}

// startNode starts a server of mode in dir, waits until it serves and creates n
// sandboxes. An empty dir is a new state directory, which close removes; a given one
// (a node that drained before) is the caller's. The caller closes the node.
func startNode(ctx context.Context, opts options, mode, dir string, n int, stderr io.Writer) (_ *node, err error) {
	nd := &node{dir: dir}
	defer func() {
		if err != nil {
			nd.close()
		}
	}()
	if dir == "" {
		if dir, err = os.MkdirTemp("", "drainsim-"+mode+"-"); err != nil {
			return nil, err
		}
		nd.dir = dir
		nd.cleanup = append(nd.cleanup, func() { os.RemoveAll(dir) })
	}
	if fi, err := os.Stat(filepath.Join(dir, server.EventLogFile)); err == nil {
		nd.eventsFrom = fi.Size()
	}
	if opts.Runtime == "runsc" {
		nd.cleanup = append([]func(){func() {
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = sandbox.NewRunsc(filepath.Join(dir, "runsc")).Runtime.DeleteAll(cctx) // sandboxes whose server was SIGKILLed
		}}, nd.cleanup...)
	}
	addr, err := freeport.Addr()
	if err != nil {
		return nil, err
	}
	nd.base = "http://" + addr
	if nd.hookAddr, err = freeport.Addr(); err != nil { // drainkit's preStop hook has a listener of its own
		return nil, err
	}
	nd.tail = new(serverLog)
	tail := nd.tail
	child, err := startServer(opts, mode, dir, addr, nd.hookAddr, stderr, tail)
	if err != nil {
		return nil, err
	}
	nd.child = child
	nd.cleanup = append([]func(){func() { _ = child.Kill(); <-child.Exited() }}, nd.cleanup...)
	go func() { // an interrupted drainsim takes its server down at once
		select {
		case <-ctx.Done():
			_ = child.Kill()
		case <-child.Exited():
		}
	}()
	if nd.created, err = populate(ctx, nd.base, n, child, tail); err != nil {
		return nil, fmt.Errorf("%s: %w", mode, err)
	}
	return nd, nil
}

// close kills the server, removes what its sandboxes left (runsc) and its state directory.
func (nd *node) close() {
	for _, f := range nd.cleanup {
		f()
	}
}

// startServer runs this binary as the server of mode. What the server writes goes to
// tail, and with -v to stderr too.
func startServer(opts options, mode, dir, addr, hookAddr string, stderr io.Writer, tail *serverLog) (*kubeletsim.Child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"-listen", addr, "-state-dir", dir, "-grace", opts.Grace.String(),
		"-runtime", opts.Runtime, "-pause-latency", opts.Pause.String(),
		"-pause-jitter", fmt.Sprint(opts.Jitter), "-id-seed", fmt.Sprint(opts.IDSeed),
		"-pause-share", fmt.Sprint(opts.PauseShare), "-concurrency", fmt.Sprint(opts.Concurrency), "-devices", "2"}
	if mode != modeSeed {
		args = append(args, "-hook-listen", hookAddr) // loopback: no secret needed
	}
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), roleEnv+"="+mode, "GORACE=atexit_sleep_ms=0")
	cmd.Stdout, cmd.Stderr = io.Discard, tail
	if opts.Verbose {
		cmd.Stdout, cmd.Stderr = stderr, io.MultiWriter(stderr, tail)
	}
	dieWithParent(cmd)
	return kubeletsim.Start(cmd)
}

// populate waits for the server and creates n sandboxes that would run for a day, and
// returns their IDs. A server that exits first is reported with the last line of its
// log: why it exited.
func populate(ctx context.Context, base string, n int, child *kubeletsim.Child, tail *serverLog) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second+time.Duration(n)*time.Second)
	defer cancel()
	client := &http.Client{Timeout: 10 * time.Second}
	for {
		resp, err := client.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("server did not start: %w", err)
		case <-child.Exited():
			if why := tail.last(); why != "" {
				return nil, fmt.Errorf("server exited at start: %w: %s", child.Err(), why)
			}
			return nil, fmt.Errorf("server exited at start: %w, saying nothing (run with -v)", child.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	created := make(map[string]bool, n)
	for range n {
		id, err := create(client, base)
		if err != nil {
			return nil, err
		}
		created[id] = true
	}
	return created, nil
}

// create creates one sandbox that would run for a day and returns its ID.
func create(client *http.Client, base string) (string, error) {
	resp, err := client.Post(base+"/sandboxes", "application/json", strings.NewReader(`{"timeout_s": 86400}`))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("create sandbox: %s", resp.Status)
	}
	var sb struct{ ID string }
	if err := json.NewDecoder(resp.Body).Decode(&sb); err != nil || sb.ID == "" {
		return "", fmt.Errorf("create sandbox: %s with no ID (%v)", resp.Status, err)
	}
	return sb.ID, nil
}

// seedHook is AgentENV's preStop exec loop: until GET /sandboxes lists nothing running,
// sleep and ask again. Only the kubelet's grace period ends it.
func seedHook(base string, every time.Duration) kubeletsim.Hook {
	return kubeletsim.HookFunc(func(ctx context.Context) error {
		client := &http.Client{Timeout: 5 * time.Second}
		for {
			if _, running, err := countStates(ctx, client, base); err == nil && running == 0 {
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(every):
			}
		}
	})
}

// countStates lists the server's sandboxes and counts the paused and the running.
func countStates(ctx context.Context, client *http.Client, base string) (paused, running int, err error) {
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/sandboxes", nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	var list []struct{ State string }
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return 0, 0, fmt.Errorf("GET /sandboxes: %w", err)
	}
	for _, sb := range list {
		switch sb.State {
		case sandbox.Paused:
			paused++
		case sandbox.Running:
			running++
		}
	}
	return paused, running, nil
}

// collect reads what survived the process: the paused records of the sandboxes nd
// created, the device daemon's event log since nd started and, for drainkit, the Report
// of this termination.
func collect(mode string, nd *node, tl *kubeletsim.Timeline) (*result, error) {
	res := &result{Mode: mode, N: len(nd.created), Timeline: tl}
	st, err := store.Open(filepath.Join(nd.dir, "records"))
	if err != nil {
		return nil, err
	}
	recs, _, err := st.Load()
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		if nd.created[r.ID] && (r.PausedAt.Before(tl.KillDue) || !tl.Killed) {
			res.Preserved++
			res.PausedAt = append(res.PausedAt, r.PausedAt)
		}
	}
	sort.Slice(res.PausedAt, func(i, j int) bool { return res.PausedAt[i].Before(res.PausedAt[j]) })
	events, err := os.ReadFile(filepath.Join(nd.dir, server.EventLogFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	res.DaemonClean = int64(len(events)) > nd.eventsFrom && strings.HasSuffix(string(events[nd.eventsFrom:]), "exit\n")
	if data, err := os.ReadFile(filepath.Join(nd.dir, server.ReportFile)); err == nil {
		rep := new(drain.Report)
		if err := json.Unmarshal(data, rep); err != nil {
			return nil, err
		}
		if !rep.Start.Before(tl.Start) { // not the one an earlier server on the directory wrote
			res.Report = rep
		}
	}
	return res, nil
}

// serverLogKeep is how much of the end of a server's log serverLog keeps.
const serverLogKeep = 4 << 10

// serverLog keeps the end of what a server wrote to stderr. Without -v its log is
// otherwise discarded, and a server that exits at start says why in its last line (a
// flag it refused: sandboxd's "-grace 8s is too short for one round of pauses ..."),
// which drainsim's error must repeat for the user to act on it.
//
// It keeps, too, the lines where a sandboxd says what it started from (learned rates
// loaded, none yet, or set aside), which the drain's own lines push out of the tail:
// -warm prints what the next server's plan counted on from its own word.
type serverLog struct {
	mu      sync.Mutex
	buf     []byte
	partial []byte   // the last line written, until its newline
	starts  []string // lines saying what was learned, at most startLinesKeep
}

// startLineMarks are what a sandboxd's learned-rates lines at its start contain
// (internal/learned.Server.Start and Start.Cold).
var startLineMarks = []string{`msg="learned rates loaded"`, `msg="no learned rates yet`,
	`msg="learned rates unreadable`, `msg="learned estimate does not fit`, `msg="learned rates hold no estimate`,
	`msg="learned rates hold no measured estimate`}

// startLinesKeep bounds the start lines kept: a server says them once.
const startLinesKeep = 8

// Write keeps the last serverLogKeep bytes written, and the start lines.
func (l *serverLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		line, rest, ok := bytes.Cut(l.partial, []byte("\n"))
		if !ok {
			break
		}
		for _, m := range startLineMarks {
			if bytes.Contains(line, []byte(m)) && len(l.starts) < startLinesKeep {
				l.starts = append(l.starts, string(line))
				break
			}
		}
		l.partial = append(l.partial[:0], rest...)
	}
	if len(l.partial) > serverLogKeep { // a line that long is no start line
		l.partial = l.partial[:0]
	}
	l.buf = append(l.buf, p...)
	if over := len(l.buf) - serverLogKeep; over > 0 {
		l.buf = append(l.buf[:0], l.buf[over:]...)
	}
	return len(p), nil
}

// startLines returns the lines in which the server said what it started from.
func (l *serverLog) startLines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.starts...)
}

// last returns the last line written that is not blank, or "".
func (l *serverLog) last() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(string(l.buf)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
