// Package manifest checks the examples' Kubernetes manifests in their
// tests: a DaemonSet decoded strictly into the Kubernetes types, a
// container's ports and variables resolved as the kubelet resolves them,
// and the preStop hook wired to a drainkit drain endpoint. sandboxd's and
// the supervisor's deploy tests share it; what differs between them (the
// probes, the budget) stays in each test.
//
//	ds := manifest.DaemonSet(t, "../deploy/daemonset.yaml", "periodSeconds: 2", "periodSecond: 2")
//	c := ds.Spec.Template.Spec.Containers[0]
//	manifest.CheckDrainHook(t, c, cfg.HookListen, manifest.Env(c, "SANDBOXD_HOOK_SECRET"))
package manifest
