package proctest

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Child is a test run again as a child process of its own test binary,
// which the test freezes (SIGSTOP) and thaws (SIGCONT) around an instant of
// the child's run, as a container at its CPU quota or a loaded node stops a
// process, and whose standard output the test reads line by line.
type Child struct {
	cmd   *exec.Cmd
	lines *bufio.Scanner
}

// Again starts t's test again in a child process with the variable env set
// to 1 (the test runs its child's part when it is set), or to the value the
// test gave it (t.Setenv: a pid file's path), and its standard error the
// test's. At t's cleanup the child is thawed and killed, so a
// failure before Thaw leaves no process frozen.
func Again(t testing.TB, env string) *Child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^"+t.Name()+"$", "-test.count=1")
	// os/exec keeps the last of two entries: the test's value, where it set one.
	cmd.Env = append([]string{env + "=1"}, os.Environ()...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
	})
	return &Child{cmd: cmd, lines: bufio.NewScanner(out)}
}

// Line reads the child's next line, which what names for a failure.
func (c *Child) Line(t testing.TB, what string) string {
	t.Helper()
	if !c.lines.Scan() {
		t.Fatalf("the child ended before %s: %v", what, c.lines.Err())
	}
	return c.lines.Text()
}

// Time reads the child's next line, "prefix <Unix nanoseconds>", and
// returns that instant.
func (c *Child) Time(t testing.TB, prefix string) time.Time {
	t.Helper()
	line := c.Line(t, "its "+prefix+" line")
	ns, err := strconv.ParseInt(strings.TrimPrefix(line, prefix+" "), 10, 64)
	if err != nil {
		t.Fatalf("the child's %q line %q: %v", prefix, line, err)
	}
	return time.Unix(0, ns)
}

// Freeze stops the child (SIGSTOP).
func (c *Child) Freeze(t testing.TB) { c.signal(t, syscall.SIGSTOP) }

// Thaw lets the child run again (SIGCONT).
func (c *Child) Thaw(t testing.TB) { c.signal(t, syscall.SIGCONT) }

func (c *Child) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%v to the child: %v", sig, err)
	}
}

// HoldStops waits for each of the child's next n stops, each a SIGSTOP it
// sent itself at a point of its own run (FreezeSelf), however loaded the
// machine, and lets it run again (SIGCONT) frozen after the test saw it
// stop: a process held that long, n times, by its CPU quota or a loaded
// node.
func (c *Child) HoldStops(t testing.TB, n int, frozen time.Duration) {
	t.Helper()
	for range n {
		c.awaitStop(t)
		time.Sleep(frozen)
		c.Thaw(t)
	}
}

// awaitStop waits until the child has stopped itself.
func (c *Child) awaitStop(t testing.TB) {
	t.Helper()
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(c.cmd.Process.Pid, &ws, syscall.WUNTRACED, nil); err != nil {
		t.Fatal(err)
	}
	if !ws.Stopped() {
		t.Fatalf("the child did not freeze itself: %v", ws)
	}
}

// Decode reads the child's lines to its end, decoding each "prefix JSON"
// line whose prefix is a key of into into the value there (the last such
// line counts), and waits for the child, which must exit 0. It returns
// the lines it did not decode.
func (c *Child) Decode(t testing.TB, into map[string]any) (rest []string) {
	t.Helper()
	for c.lines.Scan() {
		prefix, j, _ := strings.Cut(c.lines.Text(), " ")
		v, ok := into[prefix]
		if !ok {
			rest = append(rest, c.lines.Text())
			continue
		}
		if err := json.Unmarshal([]byte(j), v); err != nil {
			t.Fatalf("the child's %q line: %v", prefix, err)
		}
	}
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("the child: %v", err)
	}
	return rest
}
