//go:build linux

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/apiflags"
	"github.com/drainkit/drainkit/internal/durflag"
	"github.com/drainkit/drainkit/internal/learned"
	"github.com/drainkit/drainkit/internal/listenaddr"
	"github.com/drainkit/drainkit/internal/startsig"
	"github.com/drainkit/drainkit/internal/statedir"
	"github.com/drainkit/drainkit/internal/termmsg"
	"github.com/drainkit/drainkit/ublk"
)

func main() {
	os.Exit(Main(context.Background(), os.Args[1:], os.Stderr))
}

// Main runs the supervisor with the command-line args (without the program
// name) and returns the exit status: the server's (see run), 2 for bad
// usage, 1 when the supervisor could not start for another reason. Bad
// usage is what the command line says: a flag it refuses (unknown,
// mistyped, out of range, one that excludes another, a -server-url port
// outside 1-65535), no "--" before the server, a -hook-listen off loopback
// with no SUPERVISOR_HOOK_SECRET or on -listen's port, a path of the wrong
// kind (a directory named where a file is read or written: a -report, a
// -termination-log, an -api-key-file, a -kubelet-config, a -ublk-kernel
// @FILE; a file named as -state-dir), a -grace the plan does not fit in, a
// file that reads but holds what is refused (an empty -api-key-file, a
// -kubelet-config or -ublk-kernel @FILE that does not parse). Not
// starting for another reason is what the machine refused (startStatus): a
// file it cannot read (an -api-key-file, a -kubelet-config, a -ublk-kernel
// @FILE) or a directory it cannot write in (-report's, -state-dir,
// -termination-log's), an address another process holds, a server or
// daemon command that does not start. When it could not start (bad usage
// included) the termination message says why. From its start until the
// process exits a SIGTERM ends nothing: it drains, or, once the drain is
// over, it is dropped; the caller must exit with the status Main returns.
func Main(ctx context.Context, args []string, stderr io.Writer) int {
	sigs := catchSignals(slog.New(slog.NewTextHandler(stderr, nil))) // first: a SIGTERM from now on is the drain's
	// Close stops catching before the exit, and a SIGTERM between the two (the kubelet's
	// again) had its default action: status 143 for a drain that went well
	// (docs/faults.md row 1117). It stays caught until the process exits.
	startsig.KeepUntilExit()
	defer sigs.Close()
	cfg, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var sup *supervisor
	var report *statedir.Lock
	if err == nil {
		err = checkOutputs(cfg)
	}
	if err == nil {
		report, err = holdReport(cfg.report, slog.New(slog.NewTextHandler(stderr, nil)))
		defer report.Release() // held until the exit: its Report is written last
	}
	if err == nil {
		sup, err = newSupervisor(cfg, stderr)
	}
	if err != nil {
		// The pod's last state says why: a mistyped flag in the manifest, or a
		// SUPERVISOR_HOOK_SECRET its Secret no longer gives, was a crash loop whose
		// reason was in the log alone (docs/faults.md row 1019).
		fmt.Fprintln(stderr, "supervisor:", err)
		writeStartFailed(cfg.termLog, err, stderr)
		return startStatus(err)
	}
	return sup.run(ctx, sigs)
}

// startStatus is Main's exit status for a start that failed with err: 1
// when the machine refused it (an error of the kernel's in err's chain:
// ENOENT, EACCES, EROFS, a file that cannot be read or created), 2 for bad
// usage (the rest: what the flags and arguments say). The two send the
// operator to different places: 2 to the command line, 1 to the node (a
// Secret's or a hostPath's mount, a port held); a file the machine did not
// give read as a flag to fix is a crash loop with nothing to fix where it
// points (docs/faults.md rows 1170, 1290). A path that names a file of the
// wrong kind (EISDIR: a directory where a file is read, the mount of a
// Secret named in place of its key's file; ENOTDIR: a file where a
// directory is) is bad usage, as a -report naming a directory is: the fix
// is the path on the command line (row 1291). A file that reads but holds
// what is refused carries no error of the kernel's: its content is the
// operator's to fix, bad usage.
func startStatus(err error) int {
	if errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.ENOTDIR) {
		return 2
	}
	if errors.As(err, new(syscall.Errno)) {
		return 1
	}
	return 2
}

// checkOutputs checks, at start, that the files the supervisor writes at exit can be
// written: a Report that cannot be is a fault found before the drain, not after it.
func checkOutputs(cfg config) error {
	if cfg.report != "" {
		if isDir(cfg.report) {
			return fmt.Errorf("-report %s is a directory: name a file (the Report is written to a file of its own)", cfg.report)
		}
		if err := writableDir(filepath.Dir(cfg.report)); err != nil {
			return fmt.Errorf("-report %s: %w", cfg.report, err)
		}
	}
	if cfg.stateDir != "" {
		if err := writableDir(cfg.stateDir); err != nil {
			return fmt.Errorf("-state-dir %s: %w", cfg.stateDir, err)
		}
	}
	// A termination message path given (the flag, or the variable) that cannot be
	// written was found at exit, the drain's summary lost after the whole drain with
	// a WARN line alone, the exit status unchanged (docs/faults.md row 1180).
	if err := termmsg.Check(cfg.termLog); err != nil {
		return err
	}
	return nil
}

// holdReport takes the lock of the -report file report (flock on
// FILE.lock beside it, statedir's) for the supervisor to hold until it
// exits, nil with no -report. Two supervisors given one -report (two
// containers of a pod mounting one volume) both drained at the pod's
// deletion and wrote their accounts over each other's, the last rename
// winning, in silence (docs/faults.md row 2163): the second one's start
// fails instead, naming the holder, as bad usage. The kernel releases the
// lock when its holder exits, however it exits. A file system that
// refuses flock (ENOLCK, EOPNOTSUPP: some network and FUSE ones) cannot
// tell: said at WARN, and the start goes on; so is a lock file another
// user made, which this one may not open.
func holdReport(report string, logger *slog.Logger) (*statedir.Lock, error) {
	if report == "" {
		return nil, nil
	}
	lock, err := statedir.TryAcquire(filepath.Dir(report), statedir.Config{File: filepath.Base(report) + ".lock"})
	var held *statedir.HeldError
	switch {
	case errors.As(err, &held):
		return nil, fmt.Errorf("-report %s: another supervisor writes its Report there, %s (its lock %s): given one file, each would write its account over the other's; give each its own -report",
			report, held.Holder, held.Path)
	case errors.Is(err, syscall.ENOLCK), errors.Is(err, syscall.EOPNOTSUPP):
		logger.Warn("supervisor: -report's file system refuses flock: another supervisor given the same -report is not found at the start",
			"report", report, "err", err)
		return nil, nil
	case errors.Is(err, fs.ErrPermission):
		// checkOutputs wrote in the directory: the lock file is another
		// user's (a supervisor run as root before its pod's runAsUser
		// changed), which failed a start that wrote its Report before
		// (docs/faults.md row 2363).
		logger.Warn("supervisor: -report's lock file is not this user's to open (another user's supervisor made it): another supervisor given the same -report is not found at the start",
			"report", report, "err", err)
		return nil, nil
	case err != nil:
		// statedir words its errors for a state directory ("state
		// directory D: ..."), which the user never gave here: the error
		// names the flag, the file and its lock file instead
		// (docs/faults.md row 2440).
		if inner := errors.Unwrap(err); inner != nil {
			err = inner
		}
		return nil, fmt.Errorf("-report %s: its lock file %s: %w", report, report+".lock", err)
	}
	return lock, nil
}

// writeStartFailed says why the supervisor could not start with err, so no
// drain ran, in the termination message (termmsg.StartFailed:
// "drainkit: no drain ran" and "supervisor: could not start: ..." on one
// line), at -termination-log or its default, as sandboxd and gvisor-worker
// do: the pod's last state then says why the container exited, where it
// said exit code 1 (or 2) and nothing else, the kubelet's default
// terminationMessagePolicy not falling back to the log (docs/faults.md rows
// 963, 1019). A command line that does not parse gives the -termination-log
// given before the flag it refused (the flag package stops there), else
// the environment's or the default path. A failure to write it goes to
// stderr.
func writeStartFailed(termLog string, err error, stderr io.Writer) {
	if werr := termmsg.WriteStartFailed("supervisor", termLog, err); werr != nil {
		fmt.Fprintln(stderr, "supervisor: termination message not written:", werr)
	}
}

// config is the parsed command line.
type config struct {
	listen      string
	hookListen  string // the preStop hook's own listener
	hookSecret  string // SUPERVISOR_HOOK_SECRET: what the hook's X-Drain-Secret header must hold
	serverURL   string
	grace       time.Duration
	concurrency int    // 0: the adaptive limit
	stateDir    string // where what a drain learned is kept for the next; empty: nowhere
	daemon      []string
	daemonSock  string // the server's own daemon, found by its socket
	api         apiFlags
	report      string
	termLog     string // the termination message path; empty: the default if it exists
	server      []string
	apiKey      string                  // tests only: the API key sent when the flags give none
	kernels     ublk.KernelDeclarations // what the operator declared about the node's kernels
	pod         string                  // this pod's name for the Kubernetes API; empty: no API access
	podUID      string                  // this pod's metadata.uid; empty: learned from the first read
	kubelet     time.Duration           // -kubelet-grace: the kubelet's own grace (node shutdown); 0: not known
	kubeletConf string                  // -kubelet-config: the node's KubeletConfiguration, for the kubelet's own grace; "": none
	client      *http.Client            // tests only: talks to the server in-process
}

const usage = `usage: supervisor [flags] -- SERVER_COMMAND [ARGS...]

`

func parseArgs(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("supervisor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	fs.StringVar(&c.listen, "listen", ":8081", "address for /readyz and /healthz")
	fs.StringVar(&c.hookListen, "hook-listen", "127.0.0.1:8082", "address for GET /drain, the preStop hook; not loopback: needs "+EnvHookSecret)
	fs.StringVar(&c.serverURL, "server-url", "", "the server's API base URL (default http://127.0.0.1:8080; with -api agentenv http://127.0.0.1:8000)")
	durflag.GraceVar(fs, &c.grace, "grace", 30*time.Second, "the pod's terminationGracePeriodSeconds")
	fs.IntVar(&c.concurrency, "concurrency", 0, "pause requests sent at once: n > 0 fixes it; 0 (the default) adapts, between 1 and 32, from what the last drain learned (-state-dir)")
	fs.StringVar(&c.stateDir, "state-dir", "", "directory (a hostPath) where what a drain learned is kept for the next one, "+learned.File+"; empty: nothing is kept")
	daemon := fs.String("daemon", "", `device daemon command, "COMMAND ARGS" (split on spaces)`)
	fs.StringVar(&c.daemonSock, "daemon-socket", "", "the Unix socket of the server's own ublk daemon: found among the server's descendants, stopped over it last (never started by the supervisor)")
	c.api.Register(fs)
	fs.StringVar(&c.report, "report", "", "file to write the JSON Report to at exit")
	fs.StringVar(&c.termLog, "termination-log", "", "file for the drain's summary at exit, the pod's terminationMessagePath (default: $"+termmsg.EnvPath+", else "+termmsg.DefaultPath+" if it exists)")
	fs.StringVar(&c.pod, "pod", os.Getenv(drain.EnvPodName), "this pod's name, for its deletionTimestamp (a grace shorter than -grace) and Events through the Kubernetes API (needs the overlay's RBAC); empty: no API access")
	fs.StringVar(&c.podUID, "pod-uid", os.Getenv(drain.EnvPodUID), "this pod's metadata.uid (Downward API), so that a new pod of its name is not taken for it; empty: learned from the first read")
	durflag.GraceVar(fs, &c.kubelet, "kubelet-grace", 0, "the grace the kubelet gives this pod when it stops it on its own (graceful node shutdown's slice, with no deletionTimestamp), in `seconds` or as a duration (25s); needs -pod; not given: not known")
	fs.StringVar(&c.kubeletConf, "kubelet-config", "", "the node's KubeletConfiguration `FILE` (the kubelet's --config, mounted from the host): -kubelet-grace computed from it for this pod's priority; needs -pod")
	// The flag package keeps only the text of a value's error: kept here, a
	// -ublk-kernel @FILE the machine does not give (ENOENT) is still what the
	// machine refused (startStatus), not a flag mistyped.
	var kernelsErr error
	fs.Func("ublk-kernel", "declare kernels known `fixed=PATTERN`, vulnerable=PATTERN or exit-may-hang=PATTERN, or @FILE of such lines; repeatable, first match wins (default: only kernel.org releases are judged by their version)", func(v string) error {
		kernelsErr = c.kernels.Set(v)
		return kernelsErr
	})
	if err := fs.Parse(args); err != nil {
		if kernelsErr != nil { // Parse stops at the first value refused: this one
			return c, renamed{err.Error(), kernelsErr}
		}
		return c, err
	}
	c.server = fs.Args()
	if len(args) > 0 && len(c.server) > 0 && !dashDashBefore(args, c.server) {
		return c, fmt.Errorf("the server command must follow \"--\": %s", strings.TrimSpace(usage))
	}
	switch {
	case len(c.server) == 0:
		return c, fmt.Errorf("no SERVER_COMMAND: %s", strings.TrimSpace(usage))
	case c.grace <= 0:
		return c, fmt.Errorf("-grace must be positive, got %v", c.grace)
	case c.kubelet < 0:
		return c, fmt.Errorf("-kubelet-grace must not be negative, got %v", c.kubelet)
	case c.concurrency < 0:
		return c, fmt.Errorf("-concurrency must be at least 0 (0 adapts), got %d", c.concurrency)
	case c.listen == "":
		return c, fmt.Errorf("-listen must not be empty")
	case c.hookListen == "":
		return c, fmt.Errorf("-hook-listen must not be empty")
	case *daemon != "" && c.daemonSock != "":
		return c, fmt.Errorf("-daemon and -daemon-socket exclude each other: the daemon is either the supervisor's child or the server's")
	}
	for _, a := range []struct{ flag, addr string }{{"-listen", c.listen}, {"-hook-listen", c.hookListen}} {
		if err := listenaddr.Check(a.addr); err != nil {
			return c, fmt.Errorf("%s %s %w", a.flag, a.addr, err)
		}
	}
	if listenaddr.SamePort(c.listen, c.hookListen) { // the second listener would refuse it as if another process held the port (row 1186)
		return c, fmt.Errorf("-hook-listen %s and -listen %s take the same port: give the preStop hook a port of its own", c.hookListen, c.listen)
	}
	c.hookSecret = os.Getenv(EnvHookSecret)
	if strings.TrimSpace(c.hookSecret) == "" && !listenaddr.Loopback(c.hookListen) { // white space alone is no secret (drain.HookGuard)
		return c, fmt.Errorf("-hook-listen %s is not a loopback address: set %s, the secret the preStop hook sends in X-Drain-Secret",
			c.hookListen, EnvHookSecret)
	}
	if err := listenaddr.CheckSecret(EnvHookSecret, c.hookSecret); err != nil {
		return c, err
	}
	c.daemon = strings.Fields(*daemon)
	if err := c.api.Finish(fs); err != nil {
		return c, err
	}
	if c.serverURL == "" {
		c.serverURL = apiflags.DefaultServerURL[c.api.API]
	}
	return c, nil
}

// dashDashBefore reports whether "--" precedes rest in args.
func dashDashBefore(args, rest []string) bool {
	i := len(args) - len(rest) - 1
	return i >= 0 && args[i] == "--"
}

// isDir reports whether path names a directory, or one that may not exist
// yet (it ends in "/"): a flag that must name a file refuses it.
func isDir(path string) bool {
	fi, err := os.Stat(path)
	return strings.HasSuffix(path, "/") || (err == nil && fi.IsDir())
}

// writableDir checks that dir is a directory this process can create a
// file in, so that a Report that cannot be written fails at start, not
// at exit.
func writableDir(dir string) error {
	f, err := os.CreateTemp(dir, ".supervisor-check-*")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}

// EnvHookSecret is the environment variable holding the secret that a
// preStop request must carry in the X-Drain-Secret header.
const EnvHookSecret = "SUPERVISOR_HOOK_SECRET"
