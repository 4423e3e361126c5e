//go:build linux

package ublk

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/drainkit/drainkit/internal/blockdev"
)

// othersDevices returns, of devs, the devices another server serves, each
// with why: its char device /dev/ublkcN (the number sysfs shows) is open,
// and the driver lets one process open it, in a process that is neither
// the daemon (daemon, its PID; 0 when not known) nor inside this
// server's cgroup: another pod's ublk server, or the host's. A node can
// run two (a DaemonSet update that starts the new pod before the old one
// has ended, another product's ublk volumes); taken for the daemon's, such
// a device was waited for, its holders kept the daemon from being asked to
// stop (which then died at SIGKILL with its own devices live), or the
// control fallback stopped and deleted it under its server. A device is
// the step's when sysfs shows no number for its char device, no process
// procfs shows has it open (its server gone, or unseen), or a holder's
// cgroup cannot be read: the old rule, every device, where the new one
// cannot tell. It reads procfs until ctx ends.
func othersDevices(ctx context.Context, sysRoot, procRoot string, devs []Device, daemon int) map[int]string {
	chars := map[blockdev.DevNum]int{}
	var nums []blockdev.DevNum
	for _, d := range devs {
		n, err := blockdev.ParseDevNum(readString(filepath.Join(sysRoot, charClassDir, d.CharName(), "dev")))
		if err == nil && d.Char {
			chars[n] = d.ID
			nums = append(nums, n)
		}
	}
	if len(nums) == 0 {
		return nil
	}
	held, _ := blockdev.CharHolders(ctx, procRoot, nums) // cut short: what it did not read is not known
	if len(held) == 0 {
		return nil
	}
	mine, err := readCgroups(ctx, procRoot, "self")
	if err != nil {
		return nil
	}
	out := map[int]string{}
	for n, pids := range held {
		var why []string
		for _, pid := range pids {
			h, err := readCgroups(ctx, procRoot, strconv.Itoa(pid))
			if pid == daemon || err != nil || mine.holds(h) {
				why = nil
				break
			}
			why = append(why, fmt.Sprintf("pid %d (%s) in %s", pid, readComm(procRoot, pid), h))
		}
		if len(why) > 0 {
			out[chars[n]] = "its /dev/ublkc" + strconv.Itoa(chars[n]) + " is open in " + strings.Join(why, ", ") +
				", outside the server's cgroup " + mine.String() + ": another server's device, left alone"
		}
	}
	return out
}

// holds reports whether a process with memberships h is inside c, the
// container a pod's SIGKILL ends: in every hierarchy c is in, h's path is
// c's or below it (a path outside this process's cgroup namespace reads
// "/.." and never is). Unlike contains, a c at the root holds every
// process: a server at the host's root, or at the root of its container's
// cgroup namespace, serves whatever it sees.
func (c cgroups) holds(h cgroups) bool {
	for k, p := range c {
		hp, ok := h[k]
		if !ok || strings.HasPrefix(hp, "/..") {
			return false
		}
		if p != "/" && hp != p && !strings.HasPrefix(hp, strings.TrimSuffix(p, "/")+"/") {
			return false
		}
	}
	return true
}

// readString is the content of the file at path, trimmed; "" when it
// cannot be read.
func readString(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// readComm is process pid's command name under procRoot, "?" when it
// cannot be read.
func readComm(procRoot string, pid int) string {
	return cmp.Or(readString(filepath.Join(procRoot, strconv.Itoa(pid), "comm")), "?")
}
