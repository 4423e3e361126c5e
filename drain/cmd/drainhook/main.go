package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/durflag"
	"github.com/drainkit/drainkit/internal/listenaddr"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// run runs the hook with the command line args, logging to logw. It
// returns the exit status: 0 once the server answered (the drain is then
// the server's, its Report says the rest), 1 when no request reached the
// drain (nothing answered, or a refusal), 2 for a bad flag or argument,
// before any request (-h prints the usage, 0). Both 1 and 2 also say why
// in the container's log (-container-log). No status holds the pod:
// the kubelet goes on to SIGTERM whatever an exec hook returns, but only
// one that failed gets a FailedPreStopHook event and its output in the
// kubelet's log (at -v=1), so a hook that started no drain must fail for
// anyone to learn it.
func run(args []string, logw io.Writer) int {
	h := drain.ExecHook{Start: drain.ProcessStart()} // T0: the kubelet started this hook
	fs := flag.NewFlagSet("drainhook", flag.ContinueOnError)
	fs.SetOutput(logw)
	defURL, listenErr := hookURL(os.Getenv(drain.EnvHookListen))
	fs.StringVar(&h.URL, "url", defURL, "URL of the server's preStop handler (the default is where drain.Server serves it: "+
		drain.EnvHookListen+" from the container's environment, or, unset, 127.0.0.1:8082, where sandboxd and the supervisor serve it too)")
	durflag.DurationVar(fs, &h.RequestTimeout, "timeout", 0, "timeout of each request (0: ExecHook's default, 10s)")
	fs.IntVar(&h.MaxFailures, "failures", 0, "consecutive failed requests before giving up (0: ExecHook's default, 5)")
	durflag.DurationVar(fs, &h.RetryInterval, "retry", 0, "pause after a failed request (0: ExecHook's default, 1s)")
	durflag.DurationVar(fs, &h.MaxWait, "max-wait", 0, "bound on the whole hook (0: the drain deadline the server reports)")
	var containerLogPath string
	fs.StringVar(&containerLogPath, "container-log", containerLog, "where the hook's last line also goes when it ended without its drain wait: PID 1's stderr, the container's log that kubectl logs shows (\"\": nowhere)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // the usage asked for, printed: no error, as drainkit's -h
		}
		// The flag package printed err and the usage to logw. The
		// -container-log is the one given before the bad flag, or the
		// default: the flags after it are not parsed.
		toContainerLog(logw, containerLogPath, slog.LevelError, usageError, err)
		return 2
	}
	urlGiven := false
	fs.Visit(func(f *flag.Flag) { urlGiven = urlGiven || f.Name == "url" })
	if listenErr != nil && !urlGiven {
		fmt.Fprintf(logw, "drainhook: %v\n", listenErr)
		toContainerLog(logw, containerLogPath, slog.LevelError, usageError, listenErr)
		return 2
	}
	if err := check(fs.Args(), h); err != nil {
		fmt.Fprintf(logw, "drainhook: %v\n", err)
		toContainerLog(logw, containerLogPath, slog.LevelError, usageError, err)
		return 2
	}
	h.Logger = slog.New(slog.NewTextHandler(logw, nil))
	// The hook runs in the server's container, with its environment: a
	// server with a secret refuses every call without it, even from
	// loopback.
	h.Secret = os.Getenv(drain.EnvHookSecret)
	sum, err := h.Run(context.Background())
	if err == nil {
		return 0
	}
	if sum == nil {
		last(h.Logger, logw, containerLogPath, slog.LevelError, "drainhook: the server never answered the hook: no drain wait; the kubelet proceeds to SIGTERM", err)
		return 1
	}
	last(h.Logger, logw, containerLogPath, slog.LevelWarn, "drainhook: giving up; the kubelet proceeds to SIGTERM", err)
	return 0
}

// hookURL is -url's default for the server's hook address listen
// (drain.EnvHookListen, read from the container's environment, which the
// hook shares with the server): http://listen/drain, an unspecified host
// (":8082", "0.0.0.0:8082", "[::]:8082") called on 127.0.0.1, which a
// listener on all addresses takes whatever its family. Unset, it is
// drain.Server's default, 127.0.0.1:8082. An exec hook's command cannot
// name the pod's address itself: the kubelet does not expand $(POD_IP) in
// lifecycle hooks, and the images this hook is for have no shell. The
// error, for a listen that is no host:port, names the variable (the
// server refuses it at start too).
func hookURL(listen string) (string, error) {
	const def = "http://127.0.0.1:8082/drain"
	if listen == "" {
		return def, nil
	}
	if err := listenaddr.Check(listen); err != nil {
		return def, fmt.Errorf("%s=%q %w; or give -url", drain.EnvHookListen, listen, err)
	}
	host, port, _ := net.SplitHostPort(listen)
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/drain", nil
}

// containerLog is -container-log's default: the stderr of the
// container's PID 1, the server, whose output the container runtime keeps
// as the container's log. Tests make it "": they must not write to the
// stderr of their machine's PID 1.
var containerLog = "/proc/1/fd/2"

// usageError is the container log's line for a bad flag or argument: a
// manifest's slip, which starts no drain as surely as a server that never
// answers.
const usageError = "drainhook: bad flag or argument: no drain wait; the kubelet proceeds to SIGTERM"

// last logs the hook's last line, for a hook that ended without the
// server saying its drain wait was over, and writes it to path too
// (toContainerLog).
func last(l *slog.Logger, logw io.Writer, path string, level slog.Level, msg string, err error) {
	l.Log(context.Background(), level, msg, "err", err)
	toContainerLog(logw, path, level, msg, err)
}

// toContainerLog writes msg and err, one line as slog's text handler
// writes it, to path (-container-log; "" writes nothing), for a hook that
// got no drain wait. The kubelet keeps an exec hook's output only in its
// own log, at -v=1, and its FailedPreStopHook event says only
// "PreStopHook failed": in the container's log the line is where `kubectl
// logs` and the node's log shipper find it, beside the server's own.
// Writing never waits: a pipe no one reads, or a full one, loses the line,
// not the hook's time; a failure is logged to logw.
func toContainerLog(logw io.Writer, path string, level slog.Level, msg string, err error) {
	if path == "" {
		return
	}
	var line bytes.Buffer
	slog.New(slog.NewTextHandler(&line, nil)).Log(context.Background(), level, msg, "err", err)
	if werr := writeNow(path, line.Bytes()); werr != nil {
		fmt.Fprintf(logw, "drainhook: -container-log: %v\n", werr)
	}
}

// writeNow appends b to the file at path, which must exist, in one write
// that does not wait on a pipe: a FIFO with no reader fails to open
// (ENXIO) and a full pipe fails the write, within a second at most.
func writeNow(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_ = f.SetWriteDeadline(time.Now().Add(time.Second)) // a regular file has none, and needs none
	_, err = f.Write(b)
	return err
}

// check refuses what the flag package lets through: arguments after the
// flags (a URL without -url would be ignored), a URL that is not http(s)
// or whose port is no TCP port, and negative bounds (zero is the default; a negative one would silently
// be the default too, or no bound).
func check(args []string, h drain.ExecHook) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected argument %q (the URL goes in -url)", args[0])
	}
	const want = "want an http:// or https:// URL such as http://127.0.0.1:8082/drain"
	u, err := url.Parse(h.URL)
	switch {
	case err != nil:
		return fmt.Errorf("-url %q: %s (%w)", h.URL, want, errors.Unwrap(err)) // url.Error repeats the URL
	case (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("-url %q: %s", h.URL, want)
	}
	// url.Parse takes any digits for a port: one no dial can use would
	// fail every request, -failures times, as if nothing listened there.
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("-url %q: port %s is no TCP port (1-65535)", h.URL, p)
		}
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"-timeout", h.RequestTimeout}, {"-retry", h.RetryInterval}, {"-max-wait", h.MaxWait}} {
		if d.v < 0 {
			return fmt.Errorf("%s must not be negative, got %v", d.flag, d.v)
		}
	}
	if h.MaxFailures < 0 {
		return fmt.Errorf("-failures must not be negative, got %d", h.MaxFailures)
	}
	return nil
}
