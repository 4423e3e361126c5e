//go:build linux

package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/termmsg"
)

// Fault: a supervisor that could not start (a server command that does not
// exist, a daemon that does not, a -listen another process holds, a -grace
// the drain's plan does not fit in) exited 1 (2 for the last) and wrote no
// termination message, where sandboxd and gvisor-worker write one (row
// 913): the pod's last state said exit code 1 and nothing else, the
// kubelet's default terminationMessagePolicy (File) not falling back to the
// log, and a mistyped server path in a manifest showed as a crash loop
// with no reason. It now writes "drainkit: no drain ran" and why, on one
// line. Real processes, -termination-log given.
//
// Fault (row 1170): every start that failed before the children started exited 2, the
// status of bad usage, though Main's doc said 1 when the supervisor could not start: an
// -api-key-file the Secret's mount does not give, a -report or -state-dir whose
// directory (a hostPath) does not exist, a -kubelet-config it cannot read. A crash
// loop's exit code then sent the operator to a command line with nothing wrong in it.
// What the machine refused now exits 1 (before: 2, the rows from "api-key-file" to
// "kubelet-config"); what the command line says, whatever the machine, exits 2 still.
func TestStartThatFailsSaysWhyInTheTerminationMessage(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer held.Close()
	missing := filepath.Join(t.TempDir(), "missing")
	file := filepath.Join(filepath.Dir(missing), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	stub := helperCommand("stubserver")
	for _, tc := range []struct {
		name   string
		flags  []string
		server []string
		code   int
		why    []string // what the reason names
	}{
		{"server", nil, []string{missing + "/sandbox-server"}, 1, []string{"starting children: server: ", missing}},
		{"daemon", []string{"-daemon", missing + "/ublkd --socket x"}, stub, 1, []string{"starting children: daemon: ", missing}},
		{"listen", []string{"-listen", held.Addr().String()}, stub, 1, []string{"-listen: ", "address already in use"}},
		{"api-key-file", []string{"-api-key-file", missing + "/key"}, stub, 1,
			[]string{"supervisor: could not start: -api-key-file: open " + missing + "/key: no such file or directory"}},
		{"report", []string{"-report", missing + "/report.json"}, stub, 1, []string{"-report " + missing + "/report.json: open " + missing + "/.supervisor-check-"}},
		{"state-dir", []string{"-state-dir", missing}, stub, 1, []string{"-state-dir " + missing + ": open " + missing + "/"}},
		{"kubelet-config", []string{"-pod", "", "-kubelet-config", missing + "/kubelet.yaml"}, stub, 1,
			[]string{"-kubelet-config: open " + missing + "/kubelet.yaml: no such file or directory"}},
		{"ublk-kernel", []string{"-ublk-kernel", "@" + missing + "/kernels"}, stub, 1,
			[]string{`invalid value "@` + missing + `/kernels" for flag -ublk-kernel: `, "open " + missing + "/kernels: no such file or directory"}},

		{"grace", []string{"-grace", "1s", "-daemon", "true"}, stub, 2, []string{"-grace 1s too short"}},
		{"concurrency", []string{"-concurrency", "-1"}, stub, 2, []string{"-concurrency must be at least 0"}},
		{"api-key-file a directory", []string{"-api-key-file", filepath.Dir(missing)}, stub, 2,
			[]string{"-api-key-file: read " + filepath.Dir(missing) + ": is a directory"}},
		{"kubelet-config a directory", []string{"-pod", "", "-kubelet-config", filepath.Dir(missing)}, stub, 2,
			[]string{"-kubelet-config: read " + filepath.Dir(missing) + ": is a directory"}},
		{"state-dir a file", []string{"-state-dir", file}, stub, 2, []string{"-state-dir " + file + ": open " + file + "/", "not a directory"}},
		// More bad usage, in Main's process: TestRefusedFlagsSayWhyInTheTerminationMessage.
	} {
		t.Run(tc.name, func(t *testing.T) {
			termLog := filepath.Join(t.TempDir(), "termination-log")
			flags := append([]string{"-listen", freeAddr(t), "-termination-log", termLog}, tc.flags...)
			sup := startSupervisor(t, flags, tc.server, EnvHookSecret+"=", EnvAPIKey+"=")
			assert.Equal(t, tc.code, sup.exitCode(t, 20*time.Second))
			msg := readFile(t, termLog)
			lines := strings.Split(strings.TrimSuffix(msg, "\n"), "\n")
			require.Len(t, lines, 2, msg)
			assert.Equal(t, "drainkit: no drain ran", lines[0])
			assert.True(t, strings.HasPrefix(lines[1], "supervisor: could not start: "), lines[1])
			for _, why := range tc.why {
				assert.Contains(t, lines[1], why)
			}
		})
	}
}

// Fault: a supervisor whose flags it refused (parseArgs: a flag the manifest mistyped, a
// -hook-listen on the pod's address whose SUPERVISOR_HOOK_SECRET the Secret no longer
// gives) or whose outputs it cannot write (-report a directory, -state-dir missing)
// exited 2 and wrote no termination message, where a start that fails writes one (row
// 963): a DaemonSet's crash loop whose pods' last state said exit code 2 and nothing
// else. It now says that no drain ran and why, at the -termination-log given before the
// flag refused, else DRAINKIT_TERMINATION_LOG's. Before: no file in any case; after:
// the two lines, exit 2 still (1 for the -state-dir missing, since row 1170).
func TestRefusedFlagsSayWhyInTheTerminationMessage(t *testing.T) {
	t.Setenv(EnvHookSecret, "")
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		args []string
		env  bool // the path from DRAINKIT_TERMINATION_LOG: an unknown flag ends the parse before -termination-log
		why  string
		code int // 2, bad usage; 1, what the machine refused (row 1170)
	}{
		{"a hook on the pod's address with no secret", []string{"-hook-listen", "[fd00::5]:8082"}, false,
			"-hook-listen [fd00::5]:8082 is not a loopback address: set " + EnvHookSecret + ", the secret the preStop hook sends in X-Drain-Secret", 2},
		{"an unknown flag", []string{"-grace-period", "30"}, true, "flag provided but not defined: -grace-period", 2},
		{"no -- before the server", []string{"-grace", "30s", "true"}, false,
			`the server command must follow "--": usage: supervisor [flags] -- SERVER_COMMAND [ARGS...]`, 2},
		{"a -report that is a directory", []string{"-report", dir}, false,
			"-report " + dir + " is a directory: name a file (the Report is written to a file of its own)", 2},
		{"a missing -state-dir", []string{"-state-dir", dir + "/missing"}, false, "-state-dir " + dir + "/missing: open " + dir + "/missing/", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			termLog := filepath.Join(t.TempDir(), "termination-log")
			var args []string
			if c.env {
				t.Setenv(termmsg.EnvPath, termLog)
			} else {
				args = []string{"-termination-log", termLog}
			}
			args = append(args, c.args...)
			if !slices.Contains(args, "true") {
				args = append(args, "--", "true")
			}
			var stderr bytes.Buffer
			require.Equal(t, c.code, Main(t.Context(), args, &stderr), "%s", &stderr)
			msg, err := os.ReadFile(termLog)
			require.NoError(t, err, "the termination message is written: %s", &stderr)
			lines := strings.Split(strings.TrimSuffix(string(msg), "\n"), "\n")
			require.Len(t, lines, 2, "%s", msg)
			assert.Equal(t, "drainkit: no drain ran", lines[0])
			assert.True(t, strings.HasPrefix(lines[1], "supervisor: could not start: "+c.why), lines[1])
		})
	}
}

// Fault: a termination message path the supervisor cannot write (-termination-log, or
// DRAINKIT_TERMINATION_LOG, in a directory that does not exist, or naming a directory: a
// mistyped terminationMessagePath beside it in the manifest) was found only at exit,
// after the whole drain: the drain's summary went nowhere, said by a WARN line alone,
// and the exit status did not change (0 for a drain that went well), where a -report or
// -state-dir it cannot write fails the start (row 1019). It now fails the start as they
// do, the error naming the flag (or the variable) and the path; the server is not
// started, and the status is startStatus's (1 for the directory the machine refused, 2
// for a path naming a directory, as for -report). Before: the server started and exited,
// Main returned 0, "termination message not written" at the end; after: 1 or 2, at once.
func TestTerminationLogItCannotWriteFailsTheStart(t *testing.T) {
	t.Setenv(EnvHookSecret, "")
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		flag bool // the path from -termination-log; else from DRAINKIT_TERMINATION_LOG
		path string
		code int
		why  string
	}{
		{"a -termination-log in a missing directory", true, dir + "/missing/termination-log", 1,
			"-termination-log " + dir + "/missing/termination-log: open " + dir + "/missing/"},
		{"a -termination-log that is a directory", true, dir, 2,
			"-termination-log " + dir + " is a directory: name a file (the termination message is written to a file of its own)"},
		{"a DRAINKIT_TERMINATION_LOG in a missing directory", false, dir + "/missing/termination-log", 1,
			"$" + termmsg.EnvPath + " " + dir + "/missing/termination-log: open " + dir + "/missing/"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"-listen", "127.0.0.1:0", "-hook-listen", "127.0.0.1:0"}
			if c.flag {
				args = append(args, "-termination-log", c.path)
			} else {
				t.Setenv(termmsg.EnvPath, c.path)
			}
			var stderr bytes.Buffer
			code := Main(t.Context(), append(args, "--", "true"), &stderr)
			assert.Equal(t, c.code, code, "%s", &stderr)
			assert.True(t, strings.HasPrefix(stderr.String(), "supervisor: "+c.why), "%s", &stderr)
			assert.NotContains(t, stderr.String(), "started child", "the server is not started")
		})
	}
}

// Fault: a bad value of an API flag (-server-url, -list-path, -fallback-list-path,
// -pause-path, -next-token, -api-key-file) or of DRAINKIT_API_KEY was refused at start
// with httpsource's words for it, the Config field the flag sets ("httpsource:
// Config.PausePath must contain ...", "httpsource: baseURL must be ..."), behind a
// prefix that named every suspect at once ("-server-url, the API flags (-api,
// -list-path, ...) or the API key (...)"): the operator, who wrote a flag, had to map
// the field back to it. The error now names the flag (or the variable) and the value.
func TestBadAPIFlagIsNamedWithItsValue(t *testing.T) {
	t.Setenv(EnvHookSecret, "")
	empty := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	for _, c := range []struct {
		args []string
		env  string // DRAINKIT_API_KEY
		why  string
	}{
		{[]string{"-server-url", "127.0.0.1:8000"}, "", `-server-url must be an absolute http(s) URL without query, got "127.0.0.1:8000"`},
		{[]string{"-api", "agentenv", "-list-path", "v2/sandboxes"}, "", `-list-path must start with "/", got "v2/sandboxes"`},
		{[]string{"-fallback-list-path", "sandboxes"}, "", `-fallback-list-path must start with "/", got "sandboxes"`},
		{[]string{"-pause-path", "/sandboxes/pause"}, "", `-pause-path must contain "{id}", got "/sandboxes/pause"`},
		{[]string{"-next-token", "x next token,nextToken"}, "", `-next-token's HEADER must be a header name`},
		{[]string{"-api-key-file", empty}, "", "-api-key-file: " + empty + " is empty"},
		{nil, "line1\nline2", "$" + EnvAPIKey + ": "},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			t.Setenv(EnvAPIKey, c.env)
			args := append([]string{"-listen", "127.0.0.1:0", "-hook-listen", "127.0.0.1:0"}, c.args...)
			var stderr bytes.Buffer
			require.Equal(t, 2, Main(t.Context(), append(args, "--", "true"), &stderr), "%s", &stderr)
			line, _, _ := strings.Cut(stderr.String(), "\n")
			assert.True(t, strings.HasPrefix(line, "supervisor: "+c.why), line)
			assert.NotContains(t, stderr.String(), "Config.", "httpsource's field, not the flag")
			if c.env != "" {
				assert.NotContains(t, stderr.String(), "line1", "the key itself is never said")
			}
		})
	}
}

// Fault: a -server-url whose port no connection can have (a typo's extra digit:
// "http://127.0.0.1:80000", or 0) passed the start, since a URL's syntax takes any
// digits there: the server started, every listing failed ("dial tcp: address 80000:
// invalid port"), the pod never turned Ready, and a drain knew no sandbox, every one
// UNKNOWN. It is now refused at start, naming the flag and the value. Before: Main ran
// the server and returned its status, 0; after: 2, no child started.
func TestServerURLPortOutOfRangeFailsTheStart(t *testing.T) {
	t.Setenv(EnvHookSecret, "")
	for _, url := range []string{"http://127.0.0.1:80000", "http://127.0.0.1:0", "http://[::1]:65536/api"} {
		t.Run(url, func(t *testing.T) {
			var stderr bytes.Buffer
			code := Main(t.Context(), []string{"-listen", "127.0.0.1:0", "-hook-listen", "127.0.0.1:0", "-server-url", url, "--", "true"}, &stderr)
			assert.Equal(t, 2, code, "%s", &stderr)
			assert.True(t, strings.HasPrefix(stderr.String(), "supervisor: -server-url "+url+": its port must be 1 to 65535"), "%s", &stderr)
			assert.NotContains(t, stderr.String(), "started child", "the server is not started")
		})
	}
}

// Fault: a -hook-listen on -listen's port (":8081" takes it on every address, so
// "[$(POD_IP)]:8081" or "127.0.0.1:8081" beside it cannot have it) passed the flags,
// and the start failed at the second listener with "address already in use", exit 1,
// which sends the operator looking for another process on the node, where the two
// flags of one command line collide. It is now refused with the flags, naming both and
// their values, as bad usage (2). Real listeners are not needed to tell: before, 1 and
// "-hook-listen: listen tcp 127.0.0.1:PORT: bind: address already in use".
func TestHookListenOnListensPortIsRefusedNamingBoth(t *testing.T) {
	t.Setenv(EnvHookSecret, "9c1f3e7a5b2d4086") // a hook off loopback needs one
	port := strings.TrimPrefix(freeAddr(t), "127.0.0.1")
	for _, c := range []struct{ listen, hook string }{
		{"127.0.0.1" + port, "127.0.0.1" + port},
		{port, "127.0.0.1" + port},
		{"127.0.0.1" + port, "[::]" + port},
	} {
		t.Run(c.listen+" "+c.hook, func(t *testing.T) {
			var stderr bytes.Buffer
			code := Main(t.Context(), []string{"-listen", c.listen, "-hook-listen", c.hook, "--", "true"}, &stderr)
			assert.Equal(t, 2, code, "%s", &stderr)
			assert.True(t, strings.HasPrefix(stderr.String(),
				"supervisor: -hook-listen "+c.hook+" and -listen "+c.listen+" take the same port"), "%s", &stderr)
		})
	}
}

// Fault: a -listen or -hook-listen whose port no listener can have (":99999", a typo's
// extra digit) passed the flags, the supervisor failing only at net.Listen, exit 1 as if
// the machine had refused it, the error naming the flag and the port alone ("listen
// tcp: address 99999: invalid port"). It is refused with the flags now, naming the flag
// and the value: exit 2, no child started.
func TestListenPortOutOfRangeIsRefusedWithTheFlags(t *testing.T) {
	t.Setenv(EnvHookSecret, "")
	for _, c := range []struct{ flag, addr, port string }{{"-listen", ":99999", "99999"}, {"-hook-listen", "127.0.0.1:70000", "70000"}} {
		t.Run(c.flag, func(t *testing.T) {
			args := map[string]string{"-listen": "127.0.0.1:0", "-hook-listen": "127.0.0.1:0"}
			args[c.flag] = c.addr
			var stderr bytes.Buffer
			code := Main(t.Context(), []string{"-listen", args["-listen"], "-hook-listen", args["-hook-listen"], "--", "true"}, &stderr)
			assert.Equal(t, 2, code, "%s", &stderr)
			assert.True(t, strings.HasPrefix(stderr.String(), "supervisor: "+c.flag+" "+c.addr+" has port "+c.port+": a port is 1 to 65535"), "%s", &stderr)
			assert.NotContains(t, stderr.String(), "started child", "the server is not started")
		})
	}
}
