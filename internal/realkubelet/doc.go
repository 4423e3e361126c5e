// Package realkubelet runs a real kubelet for end-to-end tests: containerd
// (Debian's, with runc) and a standalone kubelet (no API server) that runs
// static pods, everything under one temporary directory. drainkit's servers
// are packed as images from our own static Go binaries, imported into
// containerd, and terminated the real way: a test deletes a pod's manifest
// and the kubelet runs the preStop hook, sends SIGTERM and SIGKILLs the
// container when the grace period runs out.
//
//	kubelet := realkubelet.Require(t) // skips, or fails under CI=true, when a part is missing
//	img := realkubelet.BuildImage(t, realkubelet.Binary{Name: "sandboxd", Package: "./examples/sandboxd"})
//	node := realkubelet.Start(t, kubelet, img)
//	node.AddPod(t, pod)              // a static pod manifest
//	pid := node.WaitProcess(t, token, time.Minute) // its process on the host
//	deleted := node.DeletePod(t, pod.Name)
//	died := realkubelet.WaitExit(t, pid, time.Minute)
//
// What it needs: root, containerd, containerd-shim-runc-v2, runc and ctr on
// PATH, the go command (the images are built from this module), and a
// kubelet binary: $DRAINKIT_KUBELET, else the one .ci/build-kubelet caches.
// The kubelet's version is v1.34: the last line that still runs on cgroup v1
// and speaks CRI v1 to containerd 1.6.
//
// With gVisor: StartConfig with Config.RunscShim makes runsc containerd's
// default runtime (a standalone kubelet has no RuntimeClass), through a
// containerd-shim-runsc-v1 that RequireRunsc finds ($DRAINKIT_RUNSC_SHIM,
// else the one .ci/build-runsc-shim builds and caches; Debian's runsc ships
// none). A pod's processes then live inside gVisor's sentry, not on the
// host: Node.WatchExit sees a container's exit through containerd's events
// where WatchProcess (a pidfd) cannot.
//
// Graceful node shutdown: StartConfig with Config.ShutdownGracePeriod
// gives the kubelet a system bus of its own (dbus-daemon under the Node's
// directory, internal/fakelogind standing in for systemd-logind, the
// address in the kubelet's environment only); Node.Shutdown emits logind's
// PrepareForShutdown(true), and the kubelet terminates every pod with
// min(its grace, its group's slice), setting no deletionTimestamp. It also
// needs dbus-daemon on PATH (apt-get install dbus-daemon).
//
// With an API server: StartConfig with Config.Kubeconfig (WriteKubeconfig,
// for internal/realapiserver's Cluster) registers the kubelet's Node there;
// pods bound to it are created and deleted through the API, a deletion's
// gracePeriodSeconds and a second, shorter deletion included. A pod with a
// serviceAccountName gets the kubelet's projected token, bound to it (its
// token manager's TokenRequest), once the namespace has the
// kube-root-ca.crt ConfigMap (realapiserver.Cluster.PublishRootCA).
//
// Guarantees: Start registers its cleanup with t.Cleanup before it starts
// anything, so a failing test still ends the kubelet, every container, the
// containerd shims and containerd, unmounts what they mounted under the
// temporary directory, removes the kubepods cgroups the kubelet made and
// deletes the directory. Only one Node runs at a time on a machine (the
// kubelet's cgroups and device-plugin socket are machine-wide): a second
// Start waits for the first one's cleanup, and a Node left behind by a killed
// test process is cleaned up by the next Start.
package realkubelet
