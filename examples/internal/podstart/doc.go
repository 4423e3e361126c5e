// Package podstart reads an example program's pod once at start, before
// drain.New, so that a POD_NAME or POD_UID that does not name the pod is
// found while the pod runs and said then (drain.New: Error, the plan and the
// Report's pod_mismatch), not first at the drain, where a read that finds no
// pod of the name, or another UID under it, is taken for a force deletion
// (SIGKILL planned 2 s after SIGTERM, docs/faults.md row 580).
//
//	pod, err := kube.New(name, cfg)
//	podstart.Read(pod, logger) // then drain.New(drain.Config{Pod: pod, ...})
//
// Guarantees: the read takes at most Timeout; a read that fails (the API
// server slow, unreachable or refusing) leaves things as they were before
// it: the drain reads the pod again, as without it.
package podstart
