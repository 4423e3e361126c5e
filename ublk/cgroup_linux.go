//go:build linux

package ublk

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/blockdev"
	"github.com/drainkit/drainkit/internal/proc"
)

// cgroups is a process's cgroup membership: hierarchy ("0" for cgroup v2,
// "4:memory" style for v1) to path, as /proc/PID/cgroup lists it.
type cgroups map[string]string

// readCgroups reads /proc/PID/cgroup under procRoot ("self" for this
// process), giving up at ctx's end (readWithin).
func readCgroups(ctx context.Context, procRoot, pid string) (cgroups, error) {
	b, err := readWithin(ctx, filepath.Join(procRoot, pid, "cgroup"))
	if err != nil {
		return nil, err
	}
	cg := cgroups{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		// 0::/kubepods/pod1/ctr   or   4:memory:/docker/abc
		id, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		ctrl, p, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		cg[id+":"+ctrl] = p
	}
	if len(cg) == 0 {
		return nil, fmt.Errorf("ublk: no cgroup in %s", filepath.Join(procRoot, pid, "cgroup"))
	}
	return cg, nil
}

// String lists the memberships in a stable order, "hierarchy:path" joined
// with ";".
func (c cgroups) String() string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + ":" + c[k]
	}
	return strings.Join(parts, ";")
}

// allRoot reports whether every membership is a hierarchy's root: then
// there is no container boundary that a pod's SIGKILL would end at.
func (c cgroups) allRoot() bool {
	for _, p := range c {
		if p != "/" {
			return false
		}
	}
	return true
}

// contains reports whether a process with memberships h is inside c: in
// every hierarchy c is in, h's path is c's or below it. That is the
// process set the runtime kills with the container (cgroup.kill on v2
// kills the subtree). A path outside this process's cgroup namespace reads
// "/.." and is never inside. A c at the root everywhere contains nothing
// unless own says that root is c's own cgroup (ownRoot). It returns why
// not when it is not.
func (c cgroups) contains(h cgroups, own bool) (bool, string) {
	if c.allRoot() && !own {
		return false, "the server is in the root cgroup: no container whose SIGKILL dooms the holder"
	}
	for k, p := range c {
		hp, ok := h[k]
		if !ok {
			return false, fmt.Sprintf("not in hierarchy %s", k)
		}
		if strings.HasPrefix(hp, "/..") || !(hp == p || p == "/" || strings.HasPrefix(hp, strings.TrimSuffix(p, "/")+"/")) {
			return false, fmt.Sprintf("in %s %s, outside the server's %s", k, hp, p)
		}
	}
	return true, ""
}

// ownRoot reports whether this process's cgroup, read as "/", is its own
// cgroup and not the host's root: on cgroup v2 alone (one membership,
// "0::/"), when the process is at the root of a cgroup namespace set at a
// non-root cgroup. Container runtimes (runc under containerd or CRI-O) give
// every container on a cgroup v2 node a namespace rooted at the
// container's cgroup, so a pod's server reads its cgroup as "/", and so
// does every process of its container. Every cgroup but the root has a
// cgroup.type file (the kernel's cgroup-v2.rst), so a cgroup2 mount whose
// root is this namespace's root and that shows cgroup.type is a non-root
// cgroup seen from inside. Without such a mount it cannot tell, and says
// no: the last resort then kills nothing, as at the host's root.
func ownRoot(procRoot string, mine cgroups) bool {
	if len(mine) != 1 || mine["0:"] != "/" {
		return false
	}
	for _, dir := range cgroup2Roots(procRoot) {
		if _, err := os.Stat(filepath.Join(dir, "cgroup.type")); err == nil {
			return true
		}
	}
	return false
}

// cgroup2Roots returns where cgroup2 is mounted at the root of this
// process's cgroup namespace, as procRoot's self/mountinfo lists it.
func cgroup2Roots(procRoot string) []string {
	b, err := os.ReadFile(filepath.Join(procRoot, "self", "mountinfo"))
	if err != nil {
		return nil
	}
	var dirs []string
	for line := range strings.Lines(string(b)) {
		// 40 22 0:37 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw
		mount, fs, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(mount), strings.Fields(fs)
		if ok && len(f) >= 5 && len(g) >= 1 && g[0] == "cgroup2" && f[3] == "/" {
			dirs = append(dirs, f[4])
		}
	}
	return dirs
}

// sameProcfs reports whether procRoot shows this process's PID namespace,
// so a PID read there may be opened and signalled here.
func sameProcfs(procRoot string) bool {
	self, err := os.Readlink(filepath.Join(procRoot, "self"))
	return err == nil && self == strconv.Itoa(os.Getpid())
}

// killDoomed decides each holder's fate and kills the doomed ones: fd,
// mapping, ring and possible holders inside the server's cgroup (the pod's
// SIGKILL ends them a few seconds later anyway). Mounts, swap, stacked and
// loop devices are not released by killing a process, holders outside the
// server's cgroup are never killed, and neither is this process nor the
// daemon (daemon, its PID; 0 when not known). Each kill pins the process
// with a pidfd, checks again that it is the same holder (its cgroup, and
// an open fd, a mapping or a ring of a wanted device, or, what it holds
// still not known, a possible holder; that check stops at the first hold
// it finds and reads nothing past ctx's end, what it did not read is not
// known) and sends SIGKILL (HolderFate.Signalled), checkParallel
// holders at a time, so that a slow procfs read delays no other
// holder's SIGKILL much; once every doomed
// holder has its SIGKILL, it waits for their pidfds to say they exited
// (Killed), together and at most until ctx ends: N holders cost one exit
// wait, and a slow one delays no other's SIGKILL. Once ctx has ended, a
// doomed holder still gets its SIGKILL, and the wait looks once. held
// maps device IDs to their holders, devs maps each wanted device number
// to its ID.
func killDoomed(ctx context.Context, procRoot string, held map[int][]Holder, devs map[blockdev.DevNum]int, daemon int) (server string, fates []HolderFate) {
	return killPinned(ctx, procRoot, held, devs, daemon, pinProcess)
}

// daemonDoomed reports whether the daemon (its PID, 0 when not known)
// dies at the pod's SIGKILL: inside the server's cgroup, as a holder the
// last resort kills is. why says what was found, for the Report. A daemon
// not known, outside the cgroup, or whose cgroup cannot be read is not
// known to die with the pod: it may serve its devices on.
func daemonDoomed(ctx context.Context, procRoot string, daemon int) (doomed bool, why string) {
	if daemon <= 0 {
		return false, "the daemon's process is not known (a Socket with no Process): not known to die at the pod's SIGKILL"
	}
	if !sameProcfs(procRoot) {
		return false, "procfs " + procRoot + " is not this process's PID namespace: the daemon's cgroup cannot be read there"
	}
	mine, err := readCgroups(ctx, procRoot, "self")
	if err != nil {
		return false, "the server's cgroup is unknown: " + err.Error()
	}
	theirs, err := readCgroups(ctx, procRoot, strconv.Itoa(daemon))
	if err != nil {
		return false, "the daemon's cgroup could not be read: " + err.Error()
	}
	if in, whyNot := mine.contains(theirs, ownRoot(procRoot, mine)); !in {
		return false, "the daemon is outside the server's cgroup (" + whyNot + "): not known to die at the pod's SIGKILL"
	}
	return true, "the daemon is in the server's cgroup (" + theirs.String() + "): the pod's SIGKILL ends it"
}

// pinned is a process the last resort holds by a pidfd: internal/proc's,
// or a test's fake in virtual time.
type pinned interface {
	Signal(syscall.Signal) error
	Wait(ctx context.Context) error
	Close() error
}

// pinProcess pins pid with a pidfd; it fails with an error wrapping
// os.ErrProcessDone when pid has exited.
func pinProcess(pid int) (pinned, error) { return proc.Open(pid) }

// killPinned is killDoomed with pin to pin each doomed holder.
func killPinned(ctx context.Context, procRoot string, held map[int][]Holder, devs map[blockdev.DevNum]int, daemon int,
	pin func(pid int) (pinned, error)) (server string, fates []HolderFate) {
	mine, err := readCgroups(ctx, procRoot, "self")
	if err != nil {
		mine = nil
	}
	server = mine.String()
	own := ownRoot(procRoot, mine)
	if own {
		server += " (the root of its cgroup namespace, at a container's cgroup)"
	}
	ids := make([]int, 0, len(held))
	for id := range held {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	same := sameProcfs(procRoot)
	seen := map[int]int{} // pid -> index in fates of the hold its check decides
	dup := map[int]int{}  // index in fates -> that of the same process's first hold
	var checks []int      // indexes in fates of the holds to check, one per process
	for _, id := range ids {
		for _, h := range held[id] {
			f := HolderFate{Holder: h, Device: id}
			switch {
			case h.Kind == blockdev.Possible && h.PID == 0 && strings.HasPrefix(h.Detail, blockdev.SwapNotKnown):
				f.Reason, f.aside = "swap on a block device whose node does not resolve, which may be the disk: kernel state, no process to kill; "+
					"set aside (swapoff it)", true
			case h.Kind == blockdev.Possible && h.PID == 0:
				f.Reason, f.aside = "processes the holders scan did not read (in time, or procfs at all), or the holders of a disk whose number it did not read: none known to kill; set aside", true
			case h.Kind == blockdev.Loop:
				f.Reason = "held by a loop device backed by the disk: kernel state, no process to kill; detach it (losetup -d)"
			case h.Kind == blockdev.FileSystem:
				f.Reason = "held by a file system on the disk that no mountinfo read shows: kernel state, no process known to kill; " +
					"unmount it (one unmounted lazily lives until its last open file is closed)"
			case !isProcess(h):
				f.Reason = fmt.Sprintf("held by %s: killing a process does not release it", h.Kind)
			case h.PID == os.Getpid():
				f.Reason = "the step's own process"
			case h.PID == daemon && daemon > 0:
				f.Reason = "the ublk daemon itself: the step asks it to stop, and killing it with a live device is the host-crash path"
			case !same:
				f.Reason = "procfs " + procRoot + " is not this process's PID namespace: its PIDs cannot be signalled from here"
			case mine == nil:
				f.Reason = "the server's cgroup is unknown: " + err.Error()
			default:
				if i, ok := seen[h.PID]; ok {
					dup[len(fates)] = i // one process, several fds or devices: decided once
				} else {
					seen[h.PID] = len(fates)
					checks = append(checks, len(fates))
				}
			}
			fates = append(fates, f)
		}
	}
	// The checks run side by side, as the exit waits do: each reads
	// procfs (the cgroup, the start time, the fds), and on a loaded node
	// one after another they took N times a slow read, the last holders
	// getting their SIGKILL after the window, with no time to see them
	// exit, and the daemon asked late.
	pins := make([]pinned, len(fates))
	sem := make(chan struct{}, checkParallel)
	var wg sync.WaitGroup
	for _, i := range checks {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			fates[i], pins[i] = decideAndSignal(ctx, procRoot, mine, own, fates[i], devs, pin)
		})
	}
	wg.Wait()
	killed := map[int]pinned{} // pid -> the process sent SIGKILL
	for i := range fates {
		if j, ok := dup[i]; ok {
			f := fates[j]
			f.Holder, f.Device = fates[i].Holder, fates[i].Device
			fates[i] = f
		}
		if pins[i] != nil {
			killed[fates[i].Holder.PID] = pins[i]
		}
	}
	waitExits(ctx, killed, fates)
	return server, fates
}

// checkParallel is how many doomed holders the last resort checks (and
// sends SIGKILL) at a time: enough that a read waiting in the kernel (a
// cgroup file behind a busy cgroup lock, a long fd table) holds back no
// other holder's SIGKILL, few enough that hundreds of VMMs do not each
// walk procfs at once on a node whose CPUs are already the bottleneck.
const checkParallel = 8

// decideAndSignal handles one fd, mapping or ring holder of this PID
// namespace; own is ownRoot's answer for mine. It returns the process
// pinned when it sent it SIGKILL (f.Signalled), its exit not waited for.
func decideAndSignal(ctx context.Context, procRoot string, mine cgroups, own bool, f HolderFate, devs map[blockdev.DevNum]int,
	pin func(pid int) (pinned, error)) (HolderFate, pinned) {
	pid := strconv.Itoa(f.Holder.PID)
	theirs, err := readCgroups(ctx, procRoot, pid)
	switch {
	case exited(err):
		f.Reason, f.released = "exited by itself before the kill", true
		return f, nil
	case err != nil:
		f.Reason, f.Err = "its cgroup could not be read: not known to be doomed", err.Error()
		return f, nil
	}
	f.Cgroup = theirs.String()
	in, why := mine.contains(theirs, own)
	if !in {
		f.Reason = "outside the server's cgroup (" + why + "): not doomed by the pod's SIGKILL, never killed"
		if f.Holder.Kind == blockdev.Possible {
			f.Reason, f.aside = f.Reason+"; it may hold the disk (what it holds is not known): set aside", true
		}
		return f, nil
	}
	f.Doomed = true
	p, err := pin(f.Holder.PID)
	if err != nil {
		if errors.Is(err, os.ErrProcessDone) {
			f.Reason, f.released = "exited by itself before the kill", true
			return f, nil
		}
		f.Reason, f.Err = "doomed, but no pidfd", err.Error()
		return f, nil
	}
	// The PID is pinned now: check it is still the process we judged, and
	// that it holds a device still, or may (what it holds still not
	// known: its mappings not read, a ring's files not listed). Doomed
	// anyway, a process that may hold the disk is killed as one that does:
	// sparing it would leave the daemon to die with the disk live.
	// Its start time, read now, is the pinned process's if the SIGKILL
	// below reaches it: it had not been reaped (a pidfd's signal reaches
	// a zombie, and fails once it is reaped), so its PID was not given to
	// another process in between.
	again, err := readCgroups(ctx, procRoot, pid)
	start, serr := startTime(ctx, procRoot, f.Holder.PID)
	if serr == nil {
		f.StartTime = start // the Report's name for it, with its PID
	}
	holds, unknown := blockdev.ProcessHolds(ctx, filepath.Join(procRoot, pid), wantSet(devs))
	// What it was seen holding before is gone when it has exited, or
	// holds none now (released): the process at its PID now holds none,
	// and one seen there before is that process or one gone since.
	spare := true
	switch {
	case exited(err) || exited(serr):
		f.Reason, f.released = "exited by itself before the kill", true
	case err != nil || serr != nil:
		f.Reason, f.Err = "its cgroup or start time could not be read again once pinned: not known to be the process judged, not killed", errors.Join(err, serr).Error()
	case again.String() != f.Cgroup:
		f.Reason = "its cgroup changed before the kill (" + again.String() + "): not known to be the process judged, not killed"
	case !holds && len(unknown) == 0:
		f.Reason, f.released = "no longer holds the device (closed it: a read once pinned shows it holds none) before the kill", true
	default:
		spare = false
	}
	if spare {
		_ = p.Close()
		return f, nil
	}
	err = p.Signal(unix.SIGKILL)
	switch {
	case errors.Is(err, os.ErrProcessDone):
		// Reaped since its check: it exited by itself, and the SIGKILL
		// reached no process. Its holds went with it; a process at its
		// PID now is another, holding what it holds.
		_ = p.Close()
		f.Reason, f.released = "exited by itself before the kill", true
		return f, nil
	case err != nil:
		_ = p.Close()
		f.Reason, f.Err = "doomed, but SIGKILL failed", err.Error()
		return f, nil
	}
	f.Signalled = true // f.StartTime is its start: it was not reaped before the SIGKILL
	f.Reason = "in the server's cgroup, so doomed by the pod's SIGKILL anyway; killed so the devices can be stopped before it"
	if !holds {
		f.Reason += " (it may hold the disk: " + strings.Join(unknown, "; ") + ")"
	}
	return f, p
}

// waitExits waits for the processes sent SIGKILL (killed, by PID) to
// exit, together, until ctx ends (once it has, it looks once), closes
// them, and completes the fates of each: Killed when its exit was seen;
// otherwise, still Signalled, why not.
func waitExits(ctx context.Context, killed map[int]pinned, fates []HolderFate) {
	errs := make(map[int]error, len(killed))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for pid, p := range killed {
		wg.Go(func() {
			err := p.Wait(ctx)
			_ = p.Close()
			mu.Lock()
			errs[pid] = err
			mu.Unlock()
		})
	}
	wg.Wait()
	for i, f := range fates {
		err, ok := errs[f.Holder.PID]
		switch {
		case !ok || !f.Signalled:
		case err == nil:
			fates[i].Killed = true
		default:
			fates[i].Reason, fates[i].Err = "SIGKILL sent, its exit not seen by the end of the last resort's part of the reserve: "+
				"it runs no more code, and the disk stops all the same", err.Error()
		}
	}
}

// exited reports whether err, from reading a process's procfs files, says
// the process is gone: its directory removed once it was reaped
// (ENOENT), or reaped while the file was open (ESRCH).
func exited(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

func wantSet(devs map[blockdev.DevNum]int) map[blockdev.DevNum]bool {
	w := make(map[blockdev.DevNum]bool, len(devs))
	for d := range devs {
		w[d] = true
	}
	return w
}
