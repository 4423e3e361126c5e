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
	Verbose     bool          // servers' logs to stderr
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
	dir, err := os.MkdirTemp("", "drainsim-"+mode+"-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if opts.Runtime == "runsc" {
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = sandbox.NewRunsc(filepath.Join(dir, "runsc")).Runtime.DeleteAll(cctx) // sandboxes whose server was SIGKILLed
		}()
	}
	addr, err := freeport.Addr()
	if err != nil {
		return nil, err
	}
	hookAddr, err := freeport.Addr() // drainkit's preStop hook has a listener of its own
	if err != nil {
		return nil, err
	}
	child, err := startServer(opts, mode, dir, addr, hookAddr, stderr)
	if err != nil {
		return nil, err
	}
	defer func() { _ = child.Kill(); <-child.Exited() }()
	go func() { // an interrupted drainsim takes its server down at once
		select {
		case <-ctx.Done():
			_ = child.Kill()
		case <-child.Exited():
		}
	}()
	base := "http://" + addr
	if err := populate(ctx, base, opts.N, child); err != nil {
		return nil, fmt.Errorf("%s: %w", mode, err)
	}

	var hook kubeletsim.Hook = kubeletsim.HTTPGet{URL: "http://" + hookAddr + "/drain"}
	if mode == modeSeed {
		hook = seedHook(base, opts.SeedPoll)
	}
	tl, err := kubeletsim.Terminate(ctx, child, hook, opts.Grace)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return nil, err
	}
	res, err := collect(mode, opts.N, dir, tl)
	if err == nil && !tl.Killed {
		res.ExitErr = child.Err()
	}
	return res, err
}

// startServer runs this binary as the server of mode.
func startServer(opts options, mode, dir, addr, hookAddr string, stderr io.Writer) (*kubeletsim.Child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"-listen", addr, "-state-dir", dir, "-grace", opts.Grace.String(),
		"-runtime", opts.Runtime, "-pause-latency", opts.Pause.String(),
		"-pause-jitter", fmt.Sprint(opts.Jitter), "-concurrency", fmt.Sprint(opts.Concurrency), "-devices", "2"}
	if mode != modeSeed {
		args = append(args, "-hook-listen", hookAddr) // loopback: no secret needed
	}
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), roleEnv+"="+mode, "GORACE=atexit_sleep_ms=0")
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if opts.Verbose {
		cmd.Stdout, cmd.Stderr = stderr, stderr
	}
	dieWithParent(cmd)
	return kubeletsim.Start(cmd)
}

// populate waits for the server and creates n sandboxes that would run for a day.
func populate(ctx context.Context, base string, n int, child *kubeletsim.Child) error {
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
			return fmt.Errorf("server exited at start: %v (run with -v)", child.Err())
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
