package realkubelet_test

import (
	"fmt"

	"github.com/drainkit/drainkit/internal/realkubelet"
)

// A static pod as the real-kubelet tests write it: sandboxd on the host's
// loopback, its state on a hostPath, its preStop an httpGet to /drain.
func ExamplePod() {
	pod := realkubelet.Pod("sandboxd", 10, "/tmp/state", realkubelet.HTTPGetHook(8080, "/drain"),
		"/sandboxd", "-listen", "127.0.0.1:8080", "-state-dir", realkubelet.StateMount, "-grace", "10s")
	c := pod.Spec.Containers[0]
	fmt.Println("grace:", *pod.Spec.TerminationGracePeriodSeconds, "hostNetwork:", pod.Spec.HostNetwork)
	fmt.Println("preStop:", c.Lifecycle.PreStop.HTTPGet.Host, c.Lifecycle.PreStop.HTTPGet.Port.IntValue(), c.Lifecycle.PreStop.HTTPGet.Path)
	fmt.Println("state:", pod.Spec.Volumes[0].HostPath.Path, "at", c.VolumeMounts[0].MountPath)
	// Output:
	// grace: 10 hostNetwork: true
	// preStop: 127.0.0.1 8080 /drain
	// state: /tmp/state at /state
}
