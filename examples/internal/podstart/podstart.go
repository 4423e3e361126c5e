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

import (
	"context"
	"log/slog"
	"time"

	"github.com/drainkit/drainkit/kube"
)

// Timeout bounds the read at start: an API server that does not answer
// delays the program's start by no more than this. It is short: the drain
// reads the pod again, so a read given up on loses nothing.
const Timeout = 2 * time.Second

// Read reads pod's spec once, bounded by Timeout. What the read shows of the
// pod's identity (kube.Pod.Identity) is then start's, which drain.New says:
// a name or UID not naming the pod at Error, in the plan and the Report,
// never a force deletion. A read that fails otherwise is logged at Warn and
// changes nothing. A nil pod (no -pod, no API access) is not read.
func Read(pod *kube.Pod, log *slog.Logger) {
	if pod == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	if _, err := pod.Spec(ctx); err != nil && pod.Identity().Mismatch == nil { // a mismatch: drain.New says it
		log.Warn("the pod could not be read at start: the drain reads it again", "pod", pod.Name(), "error", err)
	}
}
