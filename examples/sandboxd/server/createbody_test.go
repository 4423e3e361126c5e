//go:build linux

package server

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/gaterefusals"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/pid1/pid1test"
)

// Fault: the gate admitted a create with its headers, before sandboxd read its body. A
// client that sent its body slowly (a slow link, a proxy that buffers) held the gate
// phase waiting for it, and one whose body came after the gate phase's deadline made its
// sandbox after the preserve phase had listed the node's: answered 201 "running", it
// was never preserved and in no Report. A real sandboxd, one fake device, 6 s grace:
//
//	client:   POST /sandboxes, headers and 5 bytes of the body
//	kubelet:  SIGTERM                      -> the gate closes
//	sandboxd: "pause: run finished"        (the preserve phase's listing is done)
//	client:   the rest of the body
//	before:   the gate phase waited to its deadline; 201 Created, a sandbox running that
//	          no Report names, the preserve phase failed, exit 1
//	now:      503 with Retry-After, no sandbox made; the drain did not wait, exit 0 (the
//	          503 comes as the gate closes, before the rest of the body: row 2243)
func TestCreateWhoseBodyComesAfterTheGateClosedIsRefused(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	cmd := exec.Command(os.Args[0], "-listen", addr, "-hook-listen", freeAddr(t), "-state-dir", dir, "-grace", "6s",
		"-pause-latency", "50ms", "-devices", "1")
	cmd.Env = append(os.Environ(), roleEnv+"=1", "GORACE=atexit_sleep_ms=0")
	var stderr logbuf.Buffer
	listed := logbuf.NewSignal(`msg="pause: run finished"`)
	cmd.Stderr = io.MultiWriter(&stderr, listed)
	p := pid1test.Start(t, cmd)
	waitStarted(t, "http://"+addr, &stderr)

	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	body := `{"timeout_s": 60}`
	_, err = fmt.Fprintf(conn, "POST /sandboxes HTTP/1.1\r\nHost: sandboxd\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body[:5])
	require.NoError(t, err)
	require.Eventually(t, func() bool { // the headers read: the gate has seen the create, or not
		code, _, _ := call(t, "GET", "http://"+addr+"/healthz", "")
		return code == http.StatusOK
	}, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-listed.Seen():
	case <-time.After(20 * time.Second):
		t.Fatalf("the preserve phase did not run: %s", &stderr)
	}
	_, _ = io.WriteString(conn, body[5:]) // sandboxd may have answered and closed by now
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err, "%s", &stderr)
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "the create is refused, not made after the listing: %s", answer)
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))

	err = p.Wait(t, 30*time.Second, "sandboxd did not exit: %s", &stderr)
	if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
		t.Errorf("sandboxd exited %d: %s", exit.ExitCode(), &stderr)
	}
	data, err := os.ReadFile(filepath.Join(dir, ReportFile))
	require.NoError(t, err)
	var rep drain.Report
	require.NoError(t, json.Unmarshal(data, &rep))
	assert.Equal(t, drain.OK, rep.Phase(drain.PhaseGate).Result, "the gate did not wait for a body")
	assert.Equal(t, drain.OK, rep.Phase(drain.PhasePreserve).Result, "no create in flight past the listing")
}

// Fault (the gate review): with row 1242's fix sandboxd reads a create's body before the
// gate, and went on reading it once the gate had closed, for a create the gate would
// refuse anyway: a client whose upload stalled (a proxy that buffers, a client paused
// mid-request, a slow link that lost its peer) held the server's HTTP step, which waited
// for it its reserve after the drain's last operation, closed the connection, and failed
// ("1 connection(s) still in a request"): exit 1 for a drain that lost nothing, and the
// client got no answer (EOF), no 503 nor Retry-After to retry by. A real sandboxd, one
// fake device, 6 s grace:
//
//	client:   POST /sandboxes, headers and 5 bytes of the body, then nothing
//	kubelet:  SIGTERM                      -> the gate closes
//	before:   no answer: the connection closed by the HTTP step, which failed; exit 1
//	now:      503 with Retry-After as the gate closes, counted as refused; exit 0
func TestCreateWhoseBodyStallsIsRefusedWhenTheGateCloses(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	cmd := exec.Command(os.Args[0], "-listen", addr, "-hook-listen", freeAddr(t), "-state-dir", dir, "-grace", "6s",
		"-pause-latency", "50ms", "-devices", "1")
	cmd.Env = append(os.Environ(), roleEnv+"=1", "GORACE=atexit_sleep_ms=0")
	var stderr logbuf.Buffer
	cmd.Stderr = &stderr
	p := pid1test.Start(t, cmd)
	waitStarted(t, "http://"+addr, &stderr)

	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	body := `{"timeout_s": 60}`
	_, err = fmt.Fprintf(conn, "POST /sandboxes HTTP/1.1\r\nHost: sandboxd\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body[:5])
	require.NoError(t, err)
	require.Eventually(t, func() bool { // the headers read: sandboxd is reading the body
		code, _, _ := call(t, "GET", "http://"+addr+"/healthz", "")
		return code == http.StatusOK
	}, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM))

	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err, "no answer to the create: %s", &stderr)
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s", answer)
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))

	err = p.Wait(t, 30*time.Second, "sandboxd did not exit: %s", &stderr)
	if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
		t.Errorf("sandboxd exited %d: %s", exit.ExitCode(), &stderr)
	}
	data, err := os.ReadFile(filepath.Join(dir, ReportFile))
	require.NoError(t, err)
	var rep drain.Report
	require.NoError(t, json.Unmarshal(data, &rep))
	h := rep.Phase("http")
	require.NotNil(t, h)
	assert.Equal(t, drain.OK, h.Result, "the stalled create held the HTTP step: %s", h.Error)
	gd, ok := gaterefusals.Read(rep.Phase(drain.PhaseGate).Detail)
	require.True(t, ok)
	assert.Equal(t, []string{"http create 1"}, gd.Kinds(), "the create is counted refused")
}
