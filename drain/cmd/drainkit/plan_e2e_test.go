package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drainkit/drainkit/internal/logbuf"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/learned"
)

// sandboxd is the example server built once for the tests that run it.
func buildSandboxd(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sandboxd")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/drainkit/drainkit/examples/sandboxd")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "building sandboxd: %s", out)
	return bin
}

type sandboxd struct {
	cmd    *exec.Cmd
	base   string
	stderr *logbuf.Buffer
	done   chan error
}

func startSandboxd(t *testing.T, bin, dir string, args ...string) *sandboxd {
	t.Helper()
	addr, hook := freeAddr(t), freeAddr(t)
	cmd := exec.Command(bin, append([]string{"-listen", addr, "-hook-listen", hook, "-state-dir", dir}, args...)...)
	s := &sandboxd{cmd: cmd, base: "http://" + addr, stderr: &logbuf.Buffer{}, done: make(chan error, 1)}
	cmd.Stderr = s.stderr
	require.NoError(t, cmd.Start())
	go func() { s.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
		}
	})
	require.Eventually(t, func() bool {
		resp, err := http.Get(s.base + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}, 30*time.Second, 20*time.Millisecond, "sandboxd did not start: %s", s.stderr)
	return s
}

// stop sends SIGTERM and waits for the exit (the drain) and its Report.
func (s *sandboxd) stop(t *testing.T, dir string) *drain.Report {
	t.Helper()
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-s.done:
		require.NoError(t, err, "sandboxd: %s", s.stderr)
	case <-time.After(2 * time.Minute):
		t.Fatalf("sandboxd did not exit after SIGTERM: %s", s.stderr)
	}
	s.done <- nil // for the cleanup
	data, err := os.ReadFile(filepath.Join(dir, "last-shutdown.json"))
	require.NoError(t, err)
	var rep drain.Report
	require.NoError(t, json.Unmarshal(data, &rep))
	return &rep
}

func post(t *testing.T, url, body string) string {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	require.Less(t, resp.StatusCode, 300, "%s: %s", url, data)
	return string(data)
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

var predictedRE = regexp.MustCompile(`predicted preserve time\s+([0-9.]+)s`)

// drainkit plan against sandboxd as a real process, fake runtime: a first
// drain teaches sandboxd how long a pause takes (saved in its state
// directory); after a restart the same sandboxes run again, drainkit plan
// reads the live API and the learned rates, and its predicted preserve time
// (rounds of the learned mean pause) is within 10 % of the preserve phase
// the next SIGTERM actually runs. A pause of the fake runtime takes 1 s plus
// writing its image: long enough that a loaded machine's disk stalls in the
// first drain do not dominate what it learns.
func TestPlanPredictsAMeasuredDrainOfSandboxd(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes: two drains of sandboxd")
	}
	const n, conc = 16, 4
	bin := buildSandboxd(t)
	dir := t.TempDir()
	args := []string{"-grace", "60s", "-pause-latency", "1s", "-concurrency", strconv.Itoa(conc)}

	s := startSandboxd(t, bin, dir, args...)
	var ids []string
	for range n {
		var v map[string]string
		require.NoError(t, json.Unmarshal([]byte(post(t, s.base+"/sandboxes", `{"timeout_s": 86400}`)), &v))
		ids = append(ids, v["id"])
	}
	first := s.stop(t, dir)
	require.Zero(t, first.Lost(), "the first drain preserves every sandbox")
	r, err := learned.Read(filepath.Join(dir, learned.File))
	require.NoError(t, err, "sandboxd saved what it learned")
	require.Equal(t, n, r.Observations)

	s = startSandboxd(t, bin, dir, args...)
	assert.Eventually(t, func() bool { return strings.Contains(s.stderr.String(), "learned rates loaded") },
		10*time.Second, 10*time.Millisecond, "sandboxd logs that it starts from what it learned")
	for _, id := range ids {
		post(t, s.base+"/sandboxes/"+id+"/resume", "")
	}
	code, out, errw := drainkit(t, "plan", "-server", s.base, "-state-dir", dir)
	require.Equal(t, exitOK, code, "%s%s", out, errw)
	t.Logf("drainkit plan:\n%s", out)
	assert.Contains(t, out, "Plan for 16 sandboxes from "+s.base+" (live)")
	m := predictedRE.FindStringSubmatch(out)
	require.NotNil(t, m, out)
	predicted, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)

	second := s.stop(t, dir)
	require.Zero(t, second.Lost())
	pres := second.Phase(drain.PhasePreserve)
	require.NotNil(t, pres)
	measured := pres.Duration.Seconds()
	t.Logf("predicted %.3fs, measured %.3fs (%+.1f %%); learned estimate %v from %d pauses (mean %v, p90 %v)",
		predicted, measured, 100*(predicted-measured)/measured, r.Estimate, r.Observations, r.Mean, r.P90)
	assert.InEpsilon(t, measured, predicted, 0.10, "the prediction is within 10 %% of the measured preserve phase")
}

func TestMakespanStartsLongestFirst(t *testing.T) {
	s := time.Second
	assert.Equal(t, 3*s, makespan([]time.Duration{s, s, s}, 1))
	assert.Equal(t, 7*s, makespan([]time.Duration{2 * s, 3 * s, 2 * s, 3 * s, 2 * s}, 2), "longest first: 3+2+2 and 3+2")
	assert.Equal(t, 4*s, makespan([]time.Duration{4 * s, s}, 8))
	assert.Zero(t, makespan(nil, 4))
}
