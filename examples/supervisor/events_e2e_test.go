//go:build linux

package main

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeapiserver"
	"github.com/drainkit/drainkit/internal/kubeletsim"
	"github.com/drainkit/drainkit/pause"
)

// The supervisor is given its pod (POD_NAME, as the overlay sets it from
// the downward API) and a service account (the overlay's RBAC): `kubectl
// delete pod --grace-period=5` while the manifest says 30 s. It reads the
// pod's deletionTimestamp at the preStop call and plans for the kubelet's
// real SIGKILL, 5 s away, not 30 s, and posts the drain's Events on the
// pod, as sandboxd and gvisor-worker do through drain.Config.Pod. Before,
// it posted nothing and planned for 30 s: with sandboxes still running, its
// preStop wait would have run into the SIGKILL.
func TestSupervisorReadsItsPodsDeletionAndPostsEvents(t *testing.T) {
	const grace = 5 * time.Second // the deletion's; the manifest's is 30 s
	api, child, hook, report := startWithPod(t)
	ctx := t.Context()

	kill := time.Now().Add(grace).Truncate(time.Second).Add(time.Second) // the API server's whole seconds
	api.SetDeletion(kill)
	tl, err := kubeletsim.Terminate(ctx, child, kubeletsim.HTTPGet{URL: "http://" + hook + "/drain", Client: noKeepAlive()}, time.Until(kill))
	require.NoError(t, err)
	t.Logf("timeline:\n%s", tl)
	assert.False(t, tl.Killed, "the supervisor was done before the SIGKILL")
	assert.NoError(t, child.Err())

	rep := readReport(t, report)
	require.NotNil(t, rep.Drain)
	// Exactly the deletion's SIGKILL, whether the pod's read landed before
	// SIGTERM or after it (deadline.Budget.OnSIGTERM), not -grace's 30 s.
	assert.Equal(t, kill.UTC(), rep.Drain.Budget.Kill.UTC(), "the drain planned for the deletion's SIGKILL")
	require.NotNil(t, rep.Drain.Preserve)
	assert.Equal(t, 3, rep.Drain.Preserve.Counts[pause.Preserved])
	require.NotNil(t, rep.Drain.Events, "the Report counts the events")
	reasons := api.Reasons()
	assert.True(t, slices.Contains(reasons, "DrainStarted"), "%v", reasons)
	assert.Equal(t, len(reasons), rep.Drain.Events.Posted, "%v", reasons)
	// The last one is flushed within 1 s at most (drain.Config.Pod): on a
	// loaded machine it may be dropped, and then the Report says so.
	assert.True(t, slices.Contains(reasons, "DrainFinished") || rep.Drain.Events.Dropped > 0,
		"DrainFinished posted or counted dropped: %v, %+v", reasons, rep.Drain.Events)
}

// startWithPod starts the supervisor, with args, in front of a fake
// AgentENV with 3 sandboxes, as the pod agentenv-node-x7k2p of a fake API
// server, and returns once it is ready: the API server's pod, the
// supervisor, its hook's address and its report file.
func startWithPod(t *testing.T, args ...string) (api *fakeapiserver.Pod, child *kubeletsim.Child, hook, report string) {
	t.Helper()
	api, env := podAPI(t)
	report = filepath.Join(t.TempDir(), "report.json")
	apiAddr, listen := freeAddr(t), freeAddr(t)
	hook = freeAddr(t)
	argv := append(helperCommand("supervisor", append([]string{
		"-api", "agentenv", "-listen", listen, "-hook-listen", hook, "-server-url", "http://" + apiAddr,
		"-grace", "30s", "-report", report}, append(args, "--")...)...),
		helperCommand("agentenv", "-listen", apiAddr, "-sandboxes", "3", "-pause-base", "10ms", "-pause-per-gib", "0s")...)
	cmd := helperCmd(argv)
	cmd.Env = append(append(cmd.Env, "POD_NAME=agentenv-node-x7k2p"), env...)
	child, err := kubeletsim.Start(cmd)
	require.NoError(t, err)
	t.Cleanup(func() { _ = child.Kill(); <-child.Exited() })
	require.Eventually(t, func() bool { return get(t.Context(), "http://"+listen+"/readyz") == 200 }, 20*time.Second, 20*time.Millisecond)
	return api, child, hook, report
}

// podAPI starts a fake API server with the pod agentenv-node-x7k2p and
// returns it and the environment (KEY=value) that gives the supervisor its
// service account there.
func podAPI(t *testing.T) (*fakeapiserver.Pod, []string) {
	t.Helper()
	api := &fakeapiserver.Pod{Name: "agentenv-node-x7k2p", Namespace: "agentenv-system", UID: "uid-1"}
	srv, kcfg := fakeapiserver.Start(t, api, "agentenv-system", "token-1")
	saDir := filepath.Dir(kcfg.TokenFile)
	require.NoError(t, os.WriteFile(filepath.Join(saDir, "namespace"), []byte("agentenv-system\n"), 0o600))
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	host, port, err := net.SplitHostPort(u.Host)
	require.NoError(t, err)
	return api, []string{EnvServiceAccountDir + "=" + saDir, "KUBERNETES_SERVICE_HOST=" + host, "KUBERNETES_SERVICE_PORT=" + port}
}

// Graceful node shutdown stops the pod with the node's slice (4 s here,
// -kubelet-grace) and sets no deletionTimestamp: the supervisor's read of
// its pod finds none, and its drain plans for T0 + 4 s instead of -grace's
// 30 s, so the preStop wait ends before the kubelet gives up on it.
func TestSupervisorPlansForTheKubeletsOwnGraceWhenItsPodHasNoDeletion(t *testing.T) {
	const slice = 4 * time.Second
	_, child, hook, report := startWithPod(t, "-kubelet-grace", slice.String())
	tl, err := kubeletsim.Terminate(t.Context(), child, kubeletsim.HTTPGet{URL: "http://" + hook + "/drain", Client: noKeepAlive()}, slice)
	require.NoError(t, err)
	t.Logf("timeline:\n%s", tl)
	assert.False(t, tl.HookKept, "the wait ended before the kubelet's 4 s, not planned for 30 s")
	assert.False(t, tl.Killed, "the supervisor was done before the SIGKILL")
	assert.NoError(t, child.Err())

	rep := readReport(t, report)
	require.NotNil(t, rep.Drain)
	assert.Equal(t, rep.Drain.Budget.Start.Add(slice), rep.Drain.Budget.Kill, "the drain's end is T0 + -kubelet-grace")
	require.NotNil(t, rep.Drain.Preserve)
	assert.Equal(t, 3, rep.Drain.Preserve.Counts[pause.Preserved])
}

// After kubectl delete --force a StatefulSet's new pod of the same name
// exists (uid-1 here), and its deletion, when it comes, is not this
// pod's. With -pod-uid (default $POD_UID, the downward API's metadata.uid)
// the supervisor knows its own pod: the other one's 5 s deletion is not
// taken, and the Events name this pod. Before, the UID was the one its
// first read found, the new pod's: SIGKILL planned 5 s out, the Events on
// the new pod. This pod, gone from the API server, was force deleted: the
// kubelet kills it 2 s after SIGTERM (row 580, measured under the real
// kubelet), and the budget plans that, not the spec's 30 s.
func TestSupervisorDoesNotTakeANewPodOfItsNameForItself(t *testing.T) {
	api, child, _, report := startWithPod(t, "-pod-uid", "uid-old")
	api.SetDeletion(time.Now().Add(5 * time.Second)) // the new pod, deleted in its turn
	tl, err := kubeletsim.Terminate(t.Context(), child, nil, 30*time.Second)
	require.NoError(t, err)
	t.Logf("timeline:\n%s", tl)

	rep := readReport(t, report)
	require.NotNil(t, rep.Drain)
	// The pod read that finds the force deletion runs beside the drain; a drain
	// of a few sandboxes may finish before it lands, the budget then as it began.
	// Once it has landed, what did not fit the 2 s is in the Report and the exit
	// status.
	if kill := rep.Drain.Budget.Kill.Sub(rep.Drain.Budget.Start); kill != 2*time.Second {
		assert.Equal(t, 30*time.Second, kill, "the grace it began with, or this pod's force deletion; never the other pod's 5 s")
		assert.NoError(t, child.Err())
	}
	require.NotEmpty(t, api.Events())
	for _, ev := range api.Events() {
		assert.Equal(t, "uid-old", string(ev.Regarding.UID), "%s names this pod", ev.Reason)
	}
}
