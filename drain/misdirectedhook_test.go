package drain

import (
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/freeport"
	"github.com/drainkit/drainkit/internal/logbuf"
)

// Fault (the user's first hour): a manifest whose preStop httpGet names
// the server's own port (the readiness probe's, 8080) instead of the
// hook's (DRAINKIT_HOOK_LISTEN, 8082) is a preStop that never reaches the
// drain: the kubelet's GET /drain gets srv's 404, which the kubelet takes
// for the hook's end (v1.34 checks no status: no FailedPreStopHook, no
// line in its log), it sends SIGTERM, and the drain runs with no preStop
// wait, its gate closing only then. Nothing, the server's log included,
// said so. The server's log now says, at Error, that
// the kubelet's hook came to srv's address and where the hook is served;
// srv's own answer is left as it was.
//
//	GET /readyz on srv      200: the server serves
//	GET /drain on srv       the kubelet's hook (User-Agent kube-lifecycle/1.34): srv's 404,
//	                        and the log names DRAINKIT_HOOK_LISTEN and its address
//	SIGTERM                 drains, anchored by SIGTERM; exit 0
//
// Real process: this test binary, re-executed, runs NewServer and Run.
func TestTheKubeletsHookOnTheServersOwnPortIsSaid(t *testing.T) {
	p := servingOneCallProcess(t)

	assert.Equal(t, http.StatusNotFound, callAsKubeletsHook(t, "http://"+p.addr+"/drain"), "srv's own answer")
	said := func() bool {
		return strings.Contains(p.stderr.String(), "the kubelet's preStop hook came to the server's own address")
	}
	assert.Eventually(t, said, 5*time.Second, 10*time.Millisecond, "the log says nothing of the hook:\n%s", p.stderr)
	assert.Contains(t, p.stderr.String(), EnvHookListen)
	assert.Contains(t, p.stderr.String(), p.hook)
	assert.Equal(t, http.StatusNotFound, callAsKubeletsHook(t, "http://"+p.addr+"/drain"), "a restarted kubelet's call again")

	p.sigtermDrains(t)
	assert.Equal(t, 1, strings.Count(p.stderr.String(), "the kubelet's preStop hook came to the server's own address"), "said once")
}

// Fault (the user's first hour): a manifest whose httpGet hook has the
// hook's port but another path (/prestop, /drain/, /preStop) got the hook
// listener's 404, which the kubelet takes for the hook's end, as above:
// SIGTERM at once, no preStop wait, and no line anywhere. The server's log
// now says, at Error, the path that came and the one the hook is.
//
//	GET /prestop on the hook's address   the kubelet's hook: 404, and the log names GET /drain
//	SIGTERM                              drains, anchored by SIGTERM; exit 0
//
// Real process: this test binary, re-executed, runs NewServer and Run.
func TestTheKubeletsHookAtAnotherPathIsSaid(t *testing.T) {
	p := servingOneCallProcess(t)

	assert.Equal(t, http.StatusNotFound, callAsKubeletsHook(t, "http://"+p.hook+"/prestop"))
	said := func() bool {
		return strings.Contains(p.stderr.String(), "the kubelet's preStop hook came to the hook's address at another path")
	}
	assert.Eventually(t, said, 5*time.Second, 10*time.Millisecond, "the log says nothing of the hook:\n%s", p.stderr)
	assert.Contains(t, p.stderr.String(), "path=/prestop")

	p.sigtermDrains(t)
}

// servingProcess is a started oneCallProcess whose hook listens on hook
// and which serves on addr; exited receives its Wait's result.
type servingProcess struct {
	cmd        *exec.Cmd
	hook, addr string
	stderr     *logbuf.Buffer
	exited     <-chan error
}

// servingOneCallProcess starts oneCallProcess with its hook listening on
// a free port and waits until it serves.
func servingOneCallProcess(t *testing.T) servingProcess {
	t.Helper()
	hook, err := freeport.Addr()
	require.NoError(t, err)
	cmd, addr, stderr := oneCallProcess(t, EnvHookListen+"="+hook)
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 20*time.Second, 10*time.Millisecond, "the server did not start: %s", stderr)
	return servingProcess{cmd: cmd, hook: hook, addr: addr, stderr: stderr, exited: exited}
}

// sigtermDrains sends p SIGTERM and requires that it drains and exits 0
// within 20 s.
func (p servingProcess) sigtermDrains(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-p.exited:
		require.NoError(t, err, "SIGTERM drained: exit 0\n%s", p.stderr)
	case <-time.After(20 * time.Second):
		t.Fatalf("SIGTERM did not end the server:\n%s", p.stderr)
	}
}

// callAsKubeletsHook GETs url as the kubelet's httpGet preStop hook does and
// returns the status it got.
func callAsKubeletsHook(t *testing.T, url string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set("User-Agent", "kube-lifecycle/1.34") // the kubelet's httpGet hook
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}
