package main

import (
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
	IDSeed  uint64
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
}

// simulate starts a server of the given mode as a real child process, creates opts.N
// sandboxes, and has the kubelet simulator terminate it.
func simulate(ctx context.Context, opts options, mode string, stderr io.Writer) (*result, error) {
	nd, err := startNode(ctx, opts, mode, opts.N, stderr)
	if err != nil {
		return nil, err
	}
	defer nd.close()
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
	res, err := collect(mode, opts.N, nd.dir, tl)
	if err == nil && !tl.Killed {
		res.ExitErr = nd.child.Err()
	}
	return res, err
}

// preflight starts drainkit's server with opts and stops it once it serves, so that
// flags it refuses (a -pause whose one round does not fit -grace) fail drainsim at once
// with the server's reason, not after the seed's whole termination. The error of a
// server that refused its flags (exit status 2) is a usageError.
func preflight(ctx context.Context, opts options, stderr io.Writer) error {
	nd, err := startNode(ctx, opts, modeDrainkit, 0, stderr)
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ExitCode() == 2 {
			return usageError{err}
		}
		return err
	}
	nd.close()
	return nil
}

// usageError is a flag drainkit's server refused: drainsim exits 2 for it.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// A node is one server process with its sandboxes, in a state directory of its own.
type node struct {
	dir, base, hookAddr string
	child               *kubeletsim.Child
	cleanup             []func() // in the order close runs them
}

// startNode starts a server of mode in a new state directory, waits until it serves and
// creates n sandboxes. The caller closes the node.
func startNode(ctx context.Context, opts options, mode string, n int, stderr io.Writer) (_ *node, err error) {
	nd := &node{}
	defer func() {
		if err != nil {
			nd.close()
		}
	}()
	if nd.dir, err = os.MkdirTemp("", "drainsim-"+mode+"-"); err != nil {
		return nil, err
	}
	dir := nd.dir
	nd.cleanup = append(nd.cleanup, func() { os.RemoveAll(dir) })
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
	tail := new(serverLog)
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
	if err := populate(ctx, nd.base, n, child, tail); err != nil {
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

// populate waits for the server and creates n sandboxes that would run for a day. A
// server that exits first is reported with the last line of its log: why it exited.
func populate(ctx context.Context, base string, n int, child *kubeletsim.Child, tail *serverLog) error {
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
			return fmt.Errorf("server did not start: %w", err)
		case <-child.Exited():
			if why := tail.last(); why != "" {
				return fmt.Errorf("server exited at start: %w: %s", child.Err(), why)
			}
			return fmt.Errorf("server exited at start: %w, saying nothing (run with -v)", child.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	for range n {
		resp, err := client.Post(base+"/sandboxes", "application/json", strings.NewReader(`{"timeout_s": 86400}`))
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			return fmt.Errorf("create sandbox: %s", resp.Status)
		}
	}
	return nil
}

// seedHook is AgentENV's preStop exec loop: until GET /sandboxes lists nothing running,
// sleep and ask again. Only the kubelet's grace period ends it.
func seedHook(base string, every time.Duration) kubeletsim.Hook {
	return kubeletsim.HookFunc(func(ctx context.Context) error {
		client := &http.Client{Timeout: 5 * time.Second}
		for {
			if running, err := countRunning(ctx, client, base); err == nil && running == 0 {
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

func countRunning(ctx context.Context, client *http.Client, base string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/sandboxes", nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var list []struct{ State string }
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return 0, err
	}
	n := 0
	for _, sb := range list {
		if sb.State == "running" {
			n++
		}
	}
	return n, nil
}

// collect reads what survived the process: paused records, the device daemon's event log
// and, for drainkit, the Report.
func collect(mode string, n int, dir string, tl *kubeletsim.Timeline) (*result, error) {
	res := &result{Mode: mode, N: n, Timeline: tl}
	st, err := store.Open(filepath.Join(dir, "records"))
	if err != nil {
		return nil, err
	}
	recs, _, err := st.Load()
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		if r.PausedAt.Before(tl.KillDue) || !tl.Killed {
			res.Preserved++
			res.PausedAt = append(res.PausedAt, r.PausedAt)
		}
	}
	sort.Slice(res.PausedAt, func(i, j int) bool { return res.PausedAt[i].Before(res.PausedAt[j]) })
	events, err := os.ReadFile(filepath.Join(dir, server.EventLogFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	res.DaemonClean = strings.HasSuffix(string(events), "exit\n")
	if data, err := os.ReadFile(filepath.Join(dir, server.ReportFile)); err == nil {
		res.Report = new(drain.Report)
		if err := json.Unmarshal(data, res.Report); err != nil {
			return nil, err
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
type serverLog struct {
	mu  sync.Mutex
	buf []byte
}

// Write keeps the last serverLogKeep bytes written.
func (l *serverLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if over := len(l.buf) - serverLogKeep; over > 0 {
		l.buf = append(l.buf[:0], l.buf[over:]...)
	}
	return len(p), nil
}

// last returns the last line written that is not blank, or "".
func (l *serverLog) last() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(string(l.buf)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
