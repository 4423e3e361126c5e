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
// never a force deletion; a static pod's before the kubelet made its mirror
// pod (kube.Identity.MirrorPending) at Info, an error only if the drain's
// read still finds no pod. A read that fails otherwise is logged at Warn and
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
