//go:build linux

package server

import (
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/pid1/pid1test"
	"github.com/drainkit/drainkit/internal/termmsg"
)

// Fault: New failing after the device daemon started (here a -hook-listen
// another process holds; a plan that does not fit -grace fails there too)
// called Close, which killed the daemon with its device live: it never
// asked the daemon to stop, as the drain's ublk step does, nor kept to
// examples/internal/daemonhold's rule, the kill that may crash the host on
// a kernel not known fixed. A real sandboxd process with one fake device:
//
//	sandboxd: lock, device daemon (ublkb0 live), the API listens
//	-hook-listen: address in use      -> New fails
//	before: Close SIGKILLs the daemon: its log ends at "start"
//	now:    the ublk step's stop: the daemon stops and deletes ublkb0 and
//	        exits on its own; sandboxd exits 1
//
// A daemon slower than the step's reserve (500 ms of a 6 s grace) on a
// kernel not known fixed leaves ublkb0 live when the reserve ends: sandboxd
// then says at ERROR that it waits for the daemon, and exits once the
// daemon has deleted its device and exited (daemonhold).
func TestStartThatFailsAfterTheDaemonStartedStopsItCleanly(t *testing.T) {
	for _, c := range []struct {
		name string
		env  []string
		held bool
	}{
		{"a daemon that stops in time", nil, false},
		{"a daemon slower than the reserve on a kernel not known fixed", []string{slowDaemonEnv + "=2s", kernelEnv + "=6.8.0-45-generic"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			stderr, _ := failToStart(t, dir, c.env, "-pause-latency", "50ms", "-devices", "1")
			assert.Contains(t, stderr.String(), "-hook-listen")
			events, err := os.ReadFile(filepath.Join(dir, EventLogFile))
			require.NoError(t, err)
			assert.Contains(t, string(events), "delete 0", "the daemon deleted its device: %s", events)
			assert.True(t, strings.HasSuffix(string(events), "exit\n"), "the daemon exited on its own, not killed: %s", events)
			const waits = "sandboxd: not exiting while the device daemon serves live devices"
			if c.held {
				assert.Contains(t, stderr.String(), waits)
			} else {
				assert.NotContains(t, stderr.String(), waits)
			}
		})
	}
}

// Fault: a sandboxd that could not start (here a -hook-listen another process holds; a
// SIGTERM while it waits for the state directory's lock, a device daemon that does not
// start, a plan that does not fit -grace end there too) exited 1 and wrote no termination
// message, where operator.md says it writes one at exit: the pod's last state showed exit
// code 1 and nothing else (the kubelet's default terminationMessagePolicy, File, does not
// fall back to the log). It now says that no drain ran and why.
func TestStartThatFailsSaysWhyInTheTerminationMessage(t *testing.T) {
	dir := t.TempDir()
	termLog := filepath.Join(dir, "termination-log")
	stderr, taken := failToStart(t, dir, nil, "-devices", "0", "-termination-log", termLog)
	msg, err := os.ReadFile(termLog)
	require.NoError(t, err, "the termination message is written: %s", stderr)
	lines := strings.Split(strings.TrimSuffix(string(msg), "\n"), "\n")
	require.Len(t, lines, 2, "%s", msg)
	assert.Equal(t, "drainkit: no drain ran", lines[0])
	assert.True(t, strings.HasPrefix(lines[1], "sandboxd: could not start: "), lines[1])
	assert.Contains(t, lines[1], "-hook-listen")
	assert.Contains(t, lines[1], taken)
}

// failToStart runs sandboxd on the state directory dir with env and args, and a
// -hook-listen address another socket holds, so that its New fails once its device
// daemon runs; it checks that sandboxd exits 1 and returns its stderr and that address.
func failToStart(t *testing.T, dir string, env []string, args ...string) (*logbuf.Buffer, string) {
	t.Helper()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	cmd := exec.Command(os.Args[0], append([]string{"-listen", freeAddr(t), "-hook-listen", taken.Addr().String(),
		"-state-dir", dir, "-grace", "6s"}, args...)...)
	cmd.Env = append(append(os.Environ(), roleEnv+"=1", "GORACE=atexit_sleep_ms=0"), env...)
	var stderr logbuf.Buffer
	cmd.Stderr = &stderr
	p := pid1test.Start(t, cmd)
	err = p.Wait(t, 30*time.Second, "sandboxd did not exit: %s", &stderr)
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", &stderr)
	require.Equal(t, 1, exit.ExitCode(), "%s", &stderr)
	return &stderr, taken.Addr().String()
}

// Fault: a sandboxd whose flags were refused (ParseFlags: a flag its manifest mistyped, a
// -hook-listen on the pod's address whose SANDBOXD_HOOK_SECRET the Secret no longer
// gives) exited 2 and wrote no termination message, where a New that fails writes one
// (row 913): a DaemonSet's crash loop whose pods' last state said exit code 2 and nothing
// else. It now says that no drain ran and why, at the -termination-log given before the
// bad flag, else DRAINKIT_TERMINATION_LOG's or the kubelet's default path.
// Before: no file in either case; after: the two lines, exit 2 still.
func TestRefusedFlagsSayWhyInTheTerminationMessage(t *testing.T) {
	t.Setenv(HookSecretEnv, "")
	for name, c := range map[string]struct {
		args []string
		env  bool // the path from DRAINKIT_TERMINATION_LOG: an unknown flag ends the parse before -termination-log
		why  string
	}{
		"a hook on the pod's address with no secret": {args: []string{"-hook-listen", "[fd00::5]:8082"}, why: "-hook-listen [fd00::5]:8082 is not a loopback address: set " + HookSecretEnv + ", the secret the preStop hook sends"},
		"an unknown flag": {args: []string{"-grace-period", "30"}, env: true, why: "flag provided but not defined: -grace-period"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			termLog := filepath.Join(dir, "termination-log")
			args := []string{"-state-dir", dir}
			if c.env {
				t.Setenv(termmsg.EnvPath, termLog)
			} else {
				args = append(args, "-termination-log", termLog)
			}
			var stderr logbuf.Buffer
			require.Equal(t, 2, Main(t.Context(), append(args, c.args...), &stderr), "%s", &stderr)
			msg, err := os.ReadFile(termLog)
			require.NoError(t, err, "the termination message is written: %s", &stderr)
			assert.Equal(t, "drainkit: no drain ran\nsandboxd: could not start: "+c.why+"\n", string(msg))
		})
	}
}

// Fault: a termination message path sandboxd cannot write (-termination-log, or
// DRAINKIT_TERMINATION_LOG, in a directory that does not exist, or naming a directory: a
// terminationMessagePath mistyped beside it in the manifest) was found only at exit, after
// the whole drain: the drain's summary went nowhere, said by one WARN line, and sandboxd
// exited 0, as the supervisor did before row 1180. A real sandboxd with a device daemon:
//
//	before: it started (the daemon, the API), drained at the kubelet's SIGTERM, then
//	        "termination message not written" at WARN, exit 0
//	now:    it does not start: "sandboxd: -termination-log PATH: ...", exit 1 for the
//	        directory the machine refused, 2 for a path naming a directory (bad usage)
func TestTerminationLogItCannotWriteFailsTheStart(t *testing.T) {
	tmp := t.TempDir()
	missing := filepath.Join(tmp, "missing", "termination-log")
	for _, c := range []struct {
		name string
		env  bool // the path from DRAINKIT_TERMINATION_LOG; else from -termination-log
		path string
		code int
		why  string
	}{
		{"a -termination-log in a missing directory", false, missing, 1, "-termination-log " + missing + ": open " + missing + ": no such file or directory"},
		{"a -termination-log that is a directory", false, tmp, 2, "-termination-log " + tmp + " is a directory: name a file"},
		{"a DRAINKIT_TERMINATION_LOG in a missing directory", true, missing, 1, "$" + termmsg.EnvPath + " " + missing + ": open " + missing},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			addr := freeAddr(t)
			args := []string{"-listen", addr, "-hook-listen", freeAddr(t), "-state-dir", dir, "-grace", "6s", "-pause-latency", "50ms", "-devices", "1"}
			env := []string{roleEnv + "=1", "GORACE=atexit_sleep_ms=0", termmsg.EnvPath + "="}
			if c.env {
				env[2] += c.path
			} else {
				args = append(args, "-termination-log", c.path)
			}
			cmd := exec.Command(os.Args[0], args...)
			cmd.Env = append(os.Environ(), env...)
			var stderr logbuf.Buffer
			cmd.Stderr = &stderr
			p := pid1test.Start(t, cmd)
			served := false
			require.Eventually(t, func() bool {
				if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
					resp.Body.Close()
					served = true
				}
				return served || p.Exited()
			}, 20*time.Second, 20*time.Millisecond, "sandboxd neither served nor exited: %s", &stderr)
			if served { // the kubelet's SIGTERM, as it would end the pod
				require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM))
			}
			err := p.Wait(t, 20*time.Second, "sandboxd did not exit: %s", &stderr)
			assert.False(t, served, "sandboxd is not started: %s", &stderr)
			code := 0
			if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
				code = exit.ExitCode()
			}
			assert.Equal(t, c.code, code, "%s", &stderr)
			assert.True(t, strings.HasPrefix(stderr.String(), "sandboxd: "+c.why), "%s", &stderr)
			_, err = os.Stat(filepath.Join(dir, EventLogFile))
			assert.ErrorIs(t, err, os.ErrNotExist, "no device daemon started")
		})
	}
}

// Fault: a -listen or -hook-listen whose port no listener can have (a typo's extra
// digit, ":99999") passed the flags: sandboxd took its state directory's lock, started
// its device daemon and failed at net.Listen, exit 1 as if the machine had refused it,
// the error naming the flag and the port alone ("-listen: listen tcp: address 99999:
// invalid port"). It is now bad usage, refused with the flags, naming the flag and the
// value: exit 2, no device daemon started.
func TestListenPortOutOfRangeIsRefusedWithTheFlags(t *testing.T) {
	for _, c := range []struct{ flag, addr string }{{"-listen", ":99999"}, {"-hook-listen", "127.0.0.1:70000"}} {
		t.Run(c.flag, func(t *testing.T) {
			dir := t.TempDir()
			args := map[string]string{"-listen": freeAddr(t), "-hook-listen": freeAddr(t)}
			args[c.flag] = c.addr
			code, stderr := exitStatus(t, "-listen", args["-listen"], "-hook-listen", args["-hook-listen"], "-state-dir", dir)
			assert.Equal(t, 2, code, "bad usage: %s", stderr)
			_, port, _ := net.SplitHostPort(c.addr)
			assert.True(t, strings.HasPrefix(stderr.String(), "sandboxd: "+c.flag+" "+c.addr+" has port "+port+": a port is 1 to 65535"), "%s", stderr)
			_, err := os.Stat(filepath.Join(dir, EventLogFile))
			assert.ErrorIs(t, err, os.ErrNotExist, "no device daemon started")
		})
	}
}

// Fault: a -state-dir sandboxd cannot take (a file, not a directory; a read-only mount)
// failed the start with statedir's error alone ("sandboxd: state directory: lstat
// /x/file/state: not a directory"), in the log and the pod's termination message, where every
// other start failure names its flag. It now reads "sandboxd: -state-dir: state
// directory: lstat ...", exit 1 still.
func TestStateDirItCannotTakeIsNamedWithItsFlag(t *testing.T) {
	tmp := t.TempDir()
	file := filepath.Join(tmp, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	termLog := filepath.Join(tmp, "termination-log")
	code, stderr := exitStatus(t, "-listen", freeAddr(t), "-hook-listen", freeAddr(t), "-state-dir", filepath.Join(file, "state"),
		"-termination-log", termLog)
	assert.Equal(t, 1, code, "what the machine refused: %s", stderr)
	why := "-state-dir: state directory: lstat " + filepath.Join(file, "state") + ": not a directory" // os.MkdirAll's
	assert.Contains(t, stderr.String(), "sandboxd: "+why+"\n")
	msg, err := os.ReadFile(termLog)
	require.NoError(t, err)
	assert.Contains(t, string(msg), "sandboxd: could not start: "+why)
}

// exitStatus runs sandboxd with args, a 6 s grace and one fake device, until it exits on
// its own, and returns its exit status and stderr.
func exitStatus(t *testing.T, args ...string) (int, *logbuf.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-grace", "6s", "-pause-latency", "50ms", "-devices", "1"}, args...)...)
	cmd.Env = append(os.Environ(), roleEnv+"=1", "GORACE=atexit_sleep_ms=0")
	var stderr logbuf.Buffer
	cmd.Stderr = &stderr
	err := pid1test.Start(t, cmd).Wait(t, 30*time.Second, "sandboxd did not exit: %s", &stderr)
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", &stderr)
	return exit.ExitCode(), &stderr
}

// Fault: a -hook-listen on -listen's port (":P" takes P on every address, so
// "127.0.0.1:P" or "[$(POD_IP)]:P" beside it cannot have it; or the same address twice)
// passed the flags: sandboxd took the state directory's lock, started its device daemon
// and its API listener, and failed at the second listener, "-hook-listen: listen tcp
// 127.0.0.1:P: bind: address already in use", exit 1 about 160 ms in, after stopping the
// daemon: what the machine refused, sending the operator to look for another process on
// the node where two flags of one command line collide. It is now refused with the flags
// (listenaddr.SamePort, as the supervisor's row 1186), naming both, exit 2, bad usage: no
// device daemon started. A real sandboxd process, as the kubelet starts it.
func TestHookListenOnListensPortIsRefusedWithTheFlags(t *testing.T) {
	port := strings.TrimPrefix(freeAddr(t), "127.0.0.1")
	for _, c := range []struct{ listen, hook string }{
		{port, "127.0.0.1" + port},
		{"127.0.0.1" + port, "127.0.0.1" + port},
	} {
		t.Run(c.listen+" "+c.hook, func(t *testing.T) {
			dir := t.TempDir()
			termLog := filepath.Join(dir, "termination-log")
			cmd := exec.Command(os.Args[0], "-listen", c.listen, "-hook-listen", c.hook,
				"-state-dir", dir, "-grace", "6s", "-devices", "1", "-termination-log", termLog)
			cmd.Env = append(os.Environ(), roleEnv+"=1", "GORACE=atexit_sleep_ms=0", HookSecretEnv+"=")
			var stderr logbuf.Buffer
			cmd.Stderr = &stderr
			err := pid1test.Start(t, cmd).Wait(t, 30*time.Second, "sandboxd did not exit: %s", &stderr)
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "%s", &stderr)
			assert.Equal(t, 2, exit.ExitCode(), "bad usage: %s", &stderr)
			why := "-hook-listen " + c.hook + " and -listen " + c.listen + " take the same port: give the preStop hook a port of its own"
			assert.True(t, strings.HasPrefix(stderr.String(), "sandboxd: "+why), "%s", &stderr)
			assert.NoFileExists(t, filepath.Join(dir, EventLogFile), "no device daemon started")
			msg, err := os.ReadFile(termLog)
			require.NoError(t, err, "%s", &stderr)
			assert.Equal(t, "drainkit: no drain ran\nsandboxd: could not start: "+why+"\n", string(msg))
		})
	}
}

// Fault (row 1391): a device daemon that did not start (here its socket's path is a
// directory that is not empty, left on the state directory's volume, so it cannot
// bind) failed sandboxd's start with "device daemon: fakeublk: daemon not ready: EOF",
// in the log line and the termination message, and the daemon's own reason ("bind:
// address already in use") only in the log, on the line the daemon wrote: the pod's
// last state said the daemon ended, not why. The reason is now in the start's error,
// so in both, as every other start failure's is; exit 1, what the machine refused.
func TestDeviceDaemonThatDoesNotStartSaysWhyInTheTerminationMessage(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(daemonSocket(dir), "left"), 0o700))
	termLog := filepath.Join(t.TempDir(), "termination-log")
	code, stderr := exitStatus(t, "-listen", freeAddr(t), "-hook-listen", freeAddr(t), "-state-dir", dir,
		"-termination-log", termLog)
	assert.Equal(t, 1, code, "what the machine refused: %s", stderr)
	const why = "bind: address already in use"
	msg, err := os.ReadFile(termLog)
	require.NoError(t, err, "%s", stderr)
	lines := strings.Split(strings.TrimSuffix(string(msg), "\n"), "\n")
	require.Len(t, lines, 2, "%s", msg)
	assert.True(t, strings.HasPrefix(lines[1], "sandboxd: could not start: device daemon: "), lines[1])
	assert.Contains(t, lines[1], why, "the daemon's reason")
	assert.Contains(t, stderr.String(), "sandboxd: device daemon: ", "%s", stderr)
	assert.Regexp(t, "sandboxd: device daemon: [^\n]*"+why, stderr.String(), "the start's own line says it too")
}
