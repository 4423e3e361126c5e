//go:build linux

package ublk

import (
	"context"

	"github.com/drainkit/drainkit/internal/blockdev"
)

// KillDoomed exposes the last resort's holder killing to the external
// tests; daemon is the daemon's PID, 0 when not known.
func KillDoomed(ctx context.Context, procRoot string, held map[int][]Holder, devs map[blockdev.DevNum]int, daemon int) (string, []HolderFate) {
	return killDoomed(ctx, procRoot, held, devs, daemon)
}

// OwnRootV2 is ownRoot for a process whose one membership is cgroup v2's
// "/", as in a container on a cgroup v2 node.
func OwnRootV2(procRoot string) bool { return ownRoot(procRoot, cgroups{"0:": "/"}) }

// Cgroup2Roots is cgroup2Roots for this process.
func Cgroup2Roots() []string { return cgroup2Roots("/proc") }
