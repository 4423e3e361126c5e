//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/examples/supervisor/internal/naiveserver"
	"github.com/drainkit/drainkit/internal/fakeagentenv"
	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/freeport"
	"github.com/drainkit/drainkit/internal/lastreport/lastreporttest"
	"github.com/drainkit/drainkit/internal/pid1/pid1test"
)

// The test binary doubles as every process the tests run: re-executed as
// "TESTBIN helper:ROLE ARGS...", it becomes the supervisor, the naive
// server, a fake device daemon, or one of the small stubs below.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && strings.HasPrefix(os.Args[1], "helper:") {
		if err := pid1test.MountProc(); err != nil { // started as PID 1 (pid1test.StartPID1): its namespace's /proc
			fmt.Fprintln(os.Stderr, "mounting /proc:", err)
			os.Exit(2)
		}
		os.Exit(runHelper(strings.TrimPrefix(os.Args[1], "helper:"), os.Args[2:]))
	}
	goleak.VerifyTestMain(m)
}

func runHelper(role string, args []string) int {
	switch role {
	case "supervisor":
		holdBeforeMain()
		code := Main(context.Background(), args, os.Stderr)
		holdAfterMain(code)
		return code
	case "naiveserver":
		return naiveserver.Main(args, os.Stderr)
	case "agentenv":
		return fakeagentenv.Main(args, os.Stderr)
	case "agentenv-pages-503": // args[0] the address; the rest, fakeagentenv's flags
		return agentenvPages503(args[0], args[1:], laterPage)
	case "agentenv-paused-pages-503": // as agentenv-pages-503, the listing of the paused ones alone
		return agentenvPages503(args[0], args[1:], func(r *http.Request) bool {
			return laterPage(r) && r.URL.Query().Get("state") == "paused"
		})
	case "agentenv-pages-503-once-none-run": // as agentenv-pages-503, once a listing found none running
		none := noneRunning{failing: laterPage}
		return agentenvPages503(args[0], args[1:], none.fails, none.seen)
	case "agentenv-503-once-none-run": // every listing's every page, once a listing found none running
		none := noneRunning{failing: func(r *http.Request) bool { return r.URL.Path == "/v2/sandboxes" }}
		return agentenvPages503(args[0], args[1:], none.fails, none.seen)
	case "agentenv-paused-503-once-none-run": // every page of the paused ones' listing, once a listing found none running
		none := noneRunning{failing: func(r *http.Request) bool {
			return r.URL.Path == "/v2/sandboxes" && r.URL.Query().Get("state") == "paused"
		}}
		return agentenvPages503(args[0], args[1:], none.fails, none.seen)
	case "daemon": // args[0]: the DaemonConfig as JSON
		var cfg fakeublk.DaemonConfig
		if err := json.Unmarshal([]byte(args[0]), &cfg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		return fakeublk.RunDaemon(cfg, os.Stdout)
	case "stubserver":
		return stubServer(args)
	case "ownedpidreuse": // PID 1 of its namespace: ownedPidReuse
		return ownedPidReuse()
	case "orphan": // start a grandchild that outlives us, then exit
		cmd := exec.Command(os.Args[0], "helper:waitfile", args[0])
		if err := cmd.Start(); err != nil {
			return 1
		}
		return 0
	case "waitfile": // exit once the file args[0] exists
		for {
			if _, err := os.Stat(args[0]); err == nil {
				return 0
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	fmt.Fprintln(os.Stderr, "unknown helper role", role)
	return 2
}

// envHoldBeforeMain, in the supervisor helper's environment, names a FIFO
// it reads to its end before it calls Main: a test holds it there, its
// packages initialised and Main not begun, and signals it.
const envHoldBeforeMain = "SUPERVISOR_TEST_HOLD_BEFORE_MAIN"

// holdBeforeMain holds the supervisor helper on the FIFO envHoldBeforeMain
// names, if any, until its writer closes it.
func holdBeforeMain() {
	fifo := os.Getenv(envHoldBeforeMain)
	if fifo == "" {
		return
	}
	if f, err := os.Open(fifo); err == nil {
		_, _ = io.Copy(io.Discard, f)
		f.Close()
	}
}

// stubServer is a server with an empty sandbox list (-list) that records the
// signals it gets, can leave orphans behind, and exits with -exit on
// SIGTERM (or on its own once the file -die-when exists).
func stubServer(args []string) int {
	fs := flag.NewFlagSet("stubserver", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "")
	signals := fs.String("signals", "", "file to append received signals to")
	exit := fs.Int("exit", 0, "exit status")
	orphans := fs.Int("orphans", 0, "orphans to leave behind")
	release := fs.String("release", "", "the orphans exit once this file exists")
	dieWhen := fs.String("die-when", "", "exit on its own once this file exists")
	list := fs.String("list", "ok", "how GET /sandboxes answers: ok (an empty list), running (sb-1 and sb-2 running, which it cannot pause), html, 500 or hang")
	listOK := fs.Int64("list-ok", 0, "with -list other than ok: the first N listings answer ok")
	var lists atomic.Int64
	if fs.Parse(args) != nil {
		return 2
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGUSR1)
	for range *orphans {
		// the middle process exits at once; its child is re-parented to
		// the supervisor, which must reap it
		_ = exec.Command(os.Args[0], "helper:orphan", *release).Run()
	}
	ln, err := net.Listen("tcp", *listen) // ready: the orphans exist
	if err != nil {
		return 1
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sandboxes", func(w http.ResponseWriter, r *http.Request) {
		mode := *list
		if lists.Add(1) <= *listOK {
			mode = "ok"
		}
		switch mode {
		case "html":
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, "<html><body>502 Bad Gateway</body></html>")
		case "500":
			http.Error(w, "internal error", http.StatusInternalServerError)
		case "hang":
			<-r.Context().Done()
		case "running":
			fmt.Fprint(w, `[{"id":"sb-1","state":"running"},{"id":"sb-2","state":"running"}]`)
		default:
			fmt.Fprint(w, "[]")
		}
	})
	go func() { _ = http.Serve(ln, mux) }()
	var die <-chan struct{}
	if *dieWhen != "" {
		exists := make(chan struct{})
		go func() {
			for {
				if _, err := os.Stat(*dieWhen); err == nil {
					close(exists)
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
		die = exists
	}
	for {
		select {
		case <-die:
			return *exit
		case sig := <-sigs:
			if *signals != "" {
				f, _ := os.OpenFile(*signals, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
				fmt.Fprintln(f, sig)
				f.Close()
			}
			if sig == syscall.SIGTERM {
				return *exit
			}
		}
	}
}

// agentenvPages503 runs the AgentENV double (fakeagentenv.Main with args)
// behind a proxy on addr that answers 503 the requests fails names (every
// page of GET /v2/sandboxes after the first, a request with a nextToken:
// laterPage), a listing whose page 2 fails; seen, when given, reads each
// answer the double gives. Its SIGTERM is the double's.
func agentenvPages503(addr string, args []string, fails func(*http.Request) bool, seen ...func(*http.Response) error) int {
	inner, err := freeport.Addr()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: inner})
	if len(seen) > 0 {
		proxy.ModifyResponse = seen[0]
	}
	go func() {
		_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if fails(r) {
				http.Error(w, `{"message":"page store unavailable"}`, http.StatusServiceUnavailable)
				return
			}
			proxy.ServeHTTP(w, r)
		}))
	}()
	return fakeagentenv.Main(append(args, "-listen", inner), os.Stderr)
}

// laterPage reports whether r asks for a page of GET /v2/sandboxes after
// the first (it has a nextToken).
func laterPage(r *http.Request) bool {
	return r.URL.Path == "/v2/sandboxes" && r.URL.Query().Has("nextToken")
}

// noneRunning fails the requests failing names (every later page:
// laterPage) once a whole unfiltered listing (no state query: the
// preserve phase's) found no sandbox running: the preserve phase's last
// one, after which only the final sweep lists.
type noneRunning struct {
	failing func(*http.Request) bool
	on      atomic.Bool
	mu      sync.Mutex
	running bool // the listing under way listed a sandbox running
}

func (n *noneRunning) fails(r *http.Request) bool { return n.on.Load() && n.failing(r) }

// seen reads an answer of an unfiltered listing's page, and turns on the
// failures at the last page of a listing that found none running.
func (n *noneRunning) seen(resp *http.Response) error {
	q := resp.Request.URL.Query()
	if resp.Request.URL.Path != "/v2/sandboxes" || q.Has("state") || resp.StatusCode != http.StatusOK {
		return nil
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	var sbs []fakeagentenv.Sandbox
	if err := json.Unmarshal(b, &sbs); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if !q.Has("nextToken") { // a new listing
		n.running = false
	}
	n.running = n.running || slices.ContainsFunc(sbs, func(sb fakeagentenv.Sandbox) bool { return sb.State == fakeagentenv.Running })
	if resp.Header.Get("x-next-token") == "" && !n.running {
		n.on.Store(true)
	}
	return nil
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// helperCmd returns an exec.Cmd for argv with the test's stdio. Under the
// race detector a process sleeps a second at exit (atexit_sleep_ms), which
// would eat the scaled-down budgets of these tests: it is turned off for
// the helper processes and everything they start.
func helperCmd(argv []string) *exec.Cmd {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	return cmd
}

// withSysfs makes the supervisor's daemon step read the fake sysfs tree,
// and an empty procfs: no process holds a fake device.
func withSysfs(cmd *exec.Cmd, root string) *exec.Cmd {
	cmd.Env = append(cmd.Env, EnvSysfsRoot+"="+root, EnvProcfsRoot+"="+emptyProcfs(root))
	return cmd
}

// emptyProcfs returns an empty directory beside the fake sysfs tree at
// root, for EnvProcfsRoot.
func emptyProcfs(root string) string {
	dir := filepath.Join(filepath.Dir(root), "proc")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		panic(err)
	}
	return dir
}

// helperCommand returns the argv that runs this test binary as role.
func helperCommand(role string, args ...string) []string {
	return append([]string{os.Args[0], "helper:" + role}, args...)
}

// A supProc is the supervisor running as a child process of the test, in
// a process group of its own.
type supProc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func startSupervisor(t *testing.T, flags []string, server []string, env ...string) *supProc {
	t.Helper()
	return startSupervisorLogging(t, nil, flags, server, env...)
}

// startSupervisorLogging is startSupervisor whose stderr also goes to log
// (nil: the test's alone).
func startSupervisorLogging(t *testing.T, log io.Writer, flags []string, server []string, env ...string) *supProc {
	t.Helper()
	if !slices.Contains(flags, "-hook-listen") {
		// Not the default port: other test processes on the machine may hold it.
		flags = append([]string{"-hook-listen", freeAddr(t)}, flags...)
	}
	argv := append(helperCommand("supervisor", flags...), "--")
	argv = append(argv, server...)
	cmd := helperCmd(argv)
	if log != nil {
		cmd.Stderr = io.MultiWriter(os.Stderr, log)
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return startSupProc(t, cmd)
}

// startSupProc starts cmd, the supervisor, in a process group of its own
// (cmd.SysProcAttr's Setpgid), killed with its group at the test's end.
func startSupProc(t *testing.T, cmd *exec.Cmd) *supProc {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &supProc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	})
	return p
}

func (p *supProc) pid() int { return p.cmd.Process.Pid }

func (p *supProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// exitCode waits for the supervisor and returns its exit status.
func (p *supProc) exitCode(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		t.Fatalf("supervisor still running after %v", within)
		return -1
	}
}

// A stubNode is the supervisor in front of a stub server, its -report and
// -termination-log in a temporary directory.
type stubNode struct {
	sup             *supProc
	report, termLog string
	listen, api     string // the supervisor's -listen, the stub's
}

// startStubNode starts a stubNode whose supervisor has -grace grace and
// whose stub server the flags stub.
func startStubNode(t *testing.T, grace string, stub ...string) *stubNode {
	t.Helper()
	dir := t.TempDir()
	n := &stubNode{report: filepath.Join(dir, "report.json"), termLog: filepath.Join(dir, "termination-log"),
		listen: freeAddr(t), api: freeAddr(t)}
	n.sup = startSupervisor(t,
		[]string{"-listen", n.listen, "-server-url", "http://" + n.api, "-grace", grace, "-report", n.report, "-termination-log", n.termLog},
		helperCommand("stubserver", append([]string{"-listen", n.api}, stub...)...))
	return n
}

// get fetches url and returns the status code, or 0 when nothing answers.
func get(ctx context.Context, url string) int { return getWith(ctx, url, "") }

// getWith is get with the hook's secret header, when secret is not empty.
func getWith(ctx context.Context, url, secret string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0
	}
	if secret != "" {
		req.Header.Set("X-Drain-Secret", secret)
	}
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func readReport(t *testing.T, path string) *Report {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &rep
}

// childrenOf lists the pids whose parent is pid, zombies included.
func childrenOf(pid int) []string {
	var out []string
	for _, child := range childPids(pid) {
		out = append(out, strconv.Itoa(child))
	}
	return out
}

// daemonCommand returns the argv of a fake ublk daemon with two devices in
// a fake sysfs tree under dir, logging its events to events.
func daemonCommand(t *testing.T, dir, events string) []string {
	t.Helper()
	cfg := fakeublk.DaemonConfig{
		SysRoot:  filepath.Join(dir, "sys"),
		Devices:  []fakeublk.DeviceSpec{{ID: 0, Major: 4000, Minor: 0}, {ID: 1, Major: 4000, Minor: 1}}, // no real disk has these numbers
		Socket:   filepath.Join(dir, "ublkd.sock"),
		EventLog: events,
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(string(b), " \t\n") {
		t.Fatalf("daemon config has spaces, -daemon cannot carry it: %s", b)
	}
	return helperCommand("daemon", string(b))
}

// daemonStarted waits until the fake ublk daemon logging its events to
// events has made its devices and handles SIGTERM.
func daemonStarted(t *testing.T, events string) {
	t.Helper()
	require.Eventually(t, func() bool { b, _ := os.ReadFile(events); return strings.Contains(string(b), "start") },
		10*time.Second, 10*time.Millisecond, "the daemon started")
}

// killHeldDaemon stands for the pod's SIGKILL on a supervisor that holds
// its exit for a hung daemon with a live device (holdWhileDaemonServes):
// once the Report at report is written, it SIGKILLs the daemon child the
// Report names, still running.
func killHeldDaemon(t *testing.T, report string) {
	t.Helper()
	require.Eventually(t, func() bool { return lastreporttest.Finished(report) }, 20*time.Second, 10*time.Millisecond, "the Report written")
	rep := readReport(t, report)
	require.NotNil(t, rep.Daemon)
	require.False(t, rep.Daemon.Exited, "the daemon still runs: %s", rep.Daemon)
	require.NoError(t, syscall.Kill(rep.Daemon.Pid, syscall.SIGKILL))
}

// serverOf returns the PID of the server among the children of the
// supervisor sup: the one whose command line contains name.
func serverOf(t *testing.T, sup *supProc, name string) int {
	t.Helper()
	for _, pid := range childrenOf(sup.pid()) {
		if n, _ := strconv.Atoi(pid); n != 0 && strings.Contains(readFile(t, "/proc/"+pid+"/cmdline"), name) {
			return n
		}
	}
	require.Fail(t, "no server among the supervisor's children")
	return 0
}
