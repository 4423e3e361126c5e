//go:build linux

package realkubelet

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// A native sidecar (an init container with restartPolicy Always) gets its
// SIGTERM only once the app containers have exited, and the kubelet v1.34
// takes the time it waited out of its grace (killContainer: gracePeriod -=
// ordering.waitForTurn, floor 2 s): its SIGKILL stays at T0 + G, not at
// SIGTERM + G − its preStop sleep, which is what a drainkit server in it
// plans at SIGTERM until the read of the pod's deletionTimestamp tightens
// it (docs/budget.md). Measured with G 10 s, the app's preStop GET taking
// 5 s and the app exiting at its SIGTERM, the sidecar ignoring SIGTERM,
// with no preStop and with a sleep of 3 s (on this 2-core machine, two
// runs: sidecar SIGTERM T0+5.07-5.09 s, dead T0+10.08-10.10 s, where
// SIGTERM + G − sleep is T0+15.1 s and T0+12.1 s).
//
//	T0 app's hook GET (and the sidecar's sleep) ... T0+5 s app's SIGTERM, exits ... sidecar's SIGTERM ... T0+G sidecar's SIGKILL
func TestRealKubeletNativeSidecarKill(t *testing.T) {
	kubelet := Require(t)
	img := BuildImage(t, Binary{Name: "podbin", Package: "./internal/realkubelet/podbin"})
	node := Start(t, kubelet, img)
	const grace, appExits = 10, 5 * time.Second
	for _, sleep := range []int64{0, 3} {
		name := fmt.Sprintf("sidecar-sleep%d", sleep)
		state := filepath.Join(node.Dir, "state-"+name)
		appPort, err := freePort()
		require.NoError(t, err)
		sidePort, err := freePort()
		require.NoError(t, err)
		token := fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
		pod := Pod(name, grace, state, HTTPGetHook(appPort, "/hook"),
			"/podbin", "probe", "-listen", fmt.Sprintf("127.0.0.1:%d", appPort), "-events", StateMount+"/events",
			"-hook", appExits.String(), "-term", "exit")
		always := corev1.ContainerRestartPolicyAlways
		side := pod.Spec.Containers[0]
		side.Name, side.RestartPolicy, side.Lifecycle = "side", &always, nil
		if sleep > 0 {
			side.Lifecycle = &corev1.Lifecycle{PreStop: SleepHook(sleep)}
		}
		side.Command = []string{"/podbin", "probe", "-listen", fmt.Sprintf("127.0.0.1:%d", sidePort), "-events", StateMount + "/side/events",
			"-term", "ignore", "-token", token}
		pod.Spec.InitContainers = []corev1.Container{side}
		require.NoError(t, os.MkdirAll(filepath.Join(state, "side"), 0o755))
		node.AddPod(t, pod)
		w, err := WatchProcess(WaitProcess(t, token, 2*time.Minute))
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			_, ok := readEvents(t, state)["ready"]
			return ok
		}, time.Minute, 20*time.Millisecond)
		time.Sleep(settle)
		deleted := node.DeletePod(t, name)
		died, err := w.Wait(time.Minute)
		require.NoError(t, err, "pod log:\n%s", node.PodLog(name))
		app, sc := readEvents(t, state), readEvents(t, filepath.Join(state, "side"))
		t0 := app["hook"]
		t.Logf("%s: G %d s, manifest deleted T0%+v; app hook T0, app SIGTERM T0+%v; sidecar SIGTERM T0+%v, sidecar dead T0+%v",
			name, grace, deleted.Sub(t0).Round(time.Millisecond), app["term"].Sub(t0).Round(time.Millisecond),
			sc["term"].Sub(t0).Round(time.Millisecond), died.Sub(t0).Round(time.Millisecond))
		require.False(t, t0.IsZero(), "no T0 (the app's hook) in the events %v", app)
		require.False(t, sc["term"].IsZero(), "no SIGTERM of the sidecar in the events %v", sc)
		assert.True(t, !sc["term"].Before(app["term"]), "the sidecar's SIGTERM comes after the app's")
		assert.InDelta(t, appExits.Seconds(), sc["term"].Sub(t0).Seconds(), 1, "the sidecar's SIGTERM once the app exited")
		assert.InDelta(t, float64(grace), died.Sub(t0).Seconds(), 1, "SIGKILL at T0 + G: the wait for the app came out of the sidecar's grace")
		planned := sc["term"].Add(time.Duration(grace-sleep) * time.Second)
		assert.Greater(t, planned.Sub(died).Seconds(), 1.5, "SIGTERM + G − sleep is later than the kill")
	}
}
