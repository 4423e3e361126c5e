//go:build linux

package ublk

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/drainkit/drainkit/internal/blockdev"
	"github.com/drainkit/drainkit/internal/procstat"
)

// othersDevices returns, of devs, the devices another server serves, each
// with why: its char device /dev/ublkcN (the number sysfs shows) is open,
// and the driver lets one process open it, in a process outside this
// server's bounds. A node can run two ublk servers (a DaemonSet update
// that starts the new pod before the old one has ended, another product's
// ublk volumes); taken for the daemon's, such a device was waited for, its
// holders kept the daemon from being asked to stop (which then died at
// SIGKILL with its own devices live), or the control fallback stopped and
// deleted it under its server.
//
// The bounds: with the daemon's PID known (daemon > 0), the daemon, its
// descendants (a daemon that forks a process for each device, as
// ublksrv does) and this server's cgroup; not known, the cgroup above this server's
// too, its pod's in Kubernetes, since a daemon in a container of its own
// beside the server is the server's.
//
// With the daemon's PID known, a live device (its disk in sysfs) whose
// /dev/ublkcN no process procfs shows has open or mapped is another
// server's too when the daemon's own fds and mappings were read and it has
// neither, and every process whose fds or mappings could not be read
// (blockdev.CharHolders) is outside the
// bounds: its server is one this procfs does not show (another pod's PID
// namespace: the DaemonSets run with hostPID false) or cannot read (another
// user's), never the daemon. Before, such a device was the step's, and
// once the daemon had stopped its own and exited, the control fallback
// stopped and deleted the other server's live disk under its VMMs.
//
// A device left out that was the daemon's own would be worse than one kept that
// was not (its holders not waited for, and a hung daemon left to die with
// it live), so a device is the step's wherever the scan cannot tell: sysfs
// shows no number for its char device, no process procfs shows has it open
// and the daemon's PID is not known (a daemon beside the server in a PID
// namespace of its own is not seen) or its fds not read, a process that may
// be the daemon's (inside the bounds, or whose cgroup is not read) could not
// be read, or a holder's cgroup cannot be read. It reads procfs until ctx
// ends, calling before (when not nil: a test's slow procfs) with each
// process directory whose cgroup it reads.
//
// A pass cut short by ctx's end tells nothing of the devices it did not
// find another's: their IDs are untold, the step's to wait for and to ask
// its daemon to stop, never the control's to stop or delete (see
// run.retell). Taken for the daemon's, as before, another server's live
// device was stopped and deleted by the control fallback when the pass
// took 1.0-1.47 s on a loaded node against its 1 s.
func othersDevices(ctx context.Context, sysRoot, procRoot string, devs []Device, daemon int, before, beforeRead func(dir string)) (out map[int]string, untold []int) {
	chars, _ := charNums(sysRoot, devs) // a number not read: no holder found, the device the step's
	own, daemonRead := daemonsOwn(ctx, procRoot, chars, daemon)
	for n := range own {
		delete(chars, n) // told: the daemon's
	}
	if len(chars) == 0 {
		return nil, nil
	}
	defer func() {
		if ctx.Err() == nil {
			return
		}
		for _, id := range chars {
			if _, ok := out[id]; !ok {
				untold = append(untold, id)
			}
		}
		slices.Sort(untold)
	}()
	held, unread, scanErr := blockdev.CharHoldersWithHook(ctx, procRoot, slices.Collect(maps.Keys(chars)), beforeRead) // cut short: what it did not read is not known
	bounds, err := readCgroupsAfter(ctx, procRoot, "self", before)
	if err != nil {
		return nil, nil
	}
	what := "the server's cgroup"
	if daemon <= 0 {
		bounds, what = bounds.parent(), "the cgroup above the server's"
	}
	outside := outsideBounds(ctx, procRoot, bounds, daemon, before)
	out = map[int]string{}
	var unseen []Device // live, their char device open in no process read
	for n, id := range chars {
		pids := held[n]
		if len(pids) == 0 {
			if i := slices.IndexFunc(devs, func(d Device) bool { return d.ID == id }); scanErr == nil && devs[i].Disk {
				unseen = append(unseen, devs[i])
			}
			continue
		}
		var why []string
		for _, pid := range pids {
			h, ok := outside(pid)
			if !ok {
				why = nil
				break
			}
			why = append(why, fmt.Sprintf("pid %d (%s) in %s", pid, readComm(procRoot, pid), h))
		}
		if len(why) > 0 {
			out[id] = "its /dev/ublkc" + strconv.Itoa(id) + " is open in " + strings.Join(why, ", ") +
				", outside " + what + " " + bounds.String() + ": another server's device, left alone"
		}
	}
	if len(unseen) > 0 {
		maps.Copy(out, servedUnseen(ctx, sysRoot, procRoot, unseen, unread, bounds, daemon, daemonRead))
	}
	return out, nil
}

// daemonsOwn reads the daemon's fds and mappings (pid daemon, when known)
// once, before any other process, and returns the char device numbers of
// chars it has open or mapped, and whether it read them all: the driver
// lets one process open a /dev/ublkcN, its server, so each is the daemon's
// device, told with no walk of procfs; only the others need one. Before,
// every device waited for a walk of every process (2000 of them, or 55 on
// a loaded QEMU guest, took the whole stage), and a pass cut short left
// the daemon's own devices untold, the control's never: a hung daemon's 8
// devices were left live. Not read (the PID not known, EACCES, an exited
// daemon, ctx ended), none is told here, and the walk tells them as
// before.
func daemonsOwn(ctx context.Context, procRoot string, chars map[blockdev.DevNum]int, daemon int) (own map[blockdev.DevNum]bool, read bool) {
	if daemon <= 0 || len(chars) == 0 {
		return nil, false
	}
	open, mapped, complete, err := blockdev.ReadCharsHeld(ctx, filepath.Join(procRoot, strconv.Itoa(daemon)), wantSet(chars))
	own = map[blockdev.DevNum]bool{}
	for _, n := range slices.Concat(open, mapped) {
		own[n] = true
	}
	return own, complete && err == nil
}

// outsideBounds returns the check, for a holder pid, of whether it is
// outside bounds and not the daemon's (not it nor its descendant), with
// the cgroups it read; a holder whose cgroup cannot be read is not. Each
// pid is read once per pass, however many devices it holds (a daemon
// that serves them all).
func outsideBounds(ctx context.Context, procRoot string, bounds cgroups, daemon int, before func(dir string)) func(pid int) (cgroups, bool) {
	type verdict struct {
		h       cgroups
		outside bool
	}
	seen := map[int]verdict{}
	return func(pid int) (cgroups, bool) {
		if v, ok := seen[pid]; ok {
			return v.h, v.outside
		}
		h, err := readCgroupsAfter(ctx, procRoot, strconv.Itoa(pid), before)
		v := verdict{h, err == nil && !bounds.holds(h) && !descends(ctx, procRoot, pid, daemon)}
		seen[pid] = v
		return v.h, v.outside
	}
}

// readCgroupsAfter is readCgroups of process pid after before (when not
// nil: a test's slow procfs) was called with its procfs directory, and
// none once ctx has ended there: the pass's time is up.
func readCgroupsAfter(ctx context.Context, procRoot, pid string, before func(dir string)) (cgroups, error) {
	if before != nil {
		before(filepath.Join(procRoot, pid))
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("ublk: %s's cgroup not read by the pass's end: %w", pid, context.Cause(ctx))
		}
	}
	return readCgroups(ctx, procRoot, pid)
}

// servedUnseen returns, of unseen (live devices whose /dev/ublkcN no
// process a complete procfs pass read has open), those the daemon (its
// PID) is known not to serve, each with why: its fds were read and it has
// none of them open, and no process whose fds were not read (unread) may
// be it or its part (inside bounds, a descendant of it, or its cgroup not
// read). None without the daemon's PID.
func servedUnseen(ctx context.Context, sysRoot, procRoot string, unseen []Device, unread map[int]error, bounds cgroups, daemon int, daemonRead bool) map[int]string {
	if daemon <= 0 {
		return nil
	}
	for pid := range unread {
		h, err := readCgroups(ctx, procRoot, strconv.Itoa(pid))
		if err != nil || bounds.holds(h) || descends(ctx, procRoot, pid, daemon) {
			return nil
		}
	}
	var served map[int]string // the daemon's fds and mappings, read first (daemonsOwn): none of unseen there
	if !daemonRead {
		var err error
		if served, err = daemonServes(ctx, sysRoot, procRoot, unseen, daemon); err != nil {
			return nil
		}
	}
	also := ""
	if len(unread) > 0 {
		also = fmt.Sprintf(", nor, as far as it can tell, in the %d process(es) whose fds or mappings could not be read, all outside the server's cgroup", len(unread))
	}
	out := map[int]string{}
	for _, d := range unseen {
		if _, ok := served[d.ID]; !ok {
			out[d.ID] = fmt.Sprintf("live, its /dev/ublkc%d open in no process procfs shows: not in the daemon (pid %d, its fds read) "+
				"nor in the server's cgroup %s%s; its server is one this procfs does not show (another pod's PID namespace) or cannot read: "+
				"another server's device, left alone", d.ID, daemon, bounds, also)
		}
	}
	return out
}

// descends reports whether process pid under procRoot is ancestor or one
// of its descendants, by the parents /proc/PID/stat names (at most 64
// generations, each read given up at ctx's end as readWithin does); false
// for ancestor 0 and when a parent cannot be read.
func descends(ctx context.Context, procRoot string, pid, ancestor int) bool {
	for range 64 {
		if ancestor <= 0 || pid <= 0 {
			return false
		}
		if pid == ancestor {
			return true
		}
		b, err := readWithin(ctx, filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
		if err != nil {
			return false
		}
		st, err := procstat.Parse(b)
		if err != nil {
			return false
		}
		pid = st.PPID
	}
	return false
}

// parent is c one level up in every hierarchy: "/kubepods/pod1/ctr" is
// "/kubepods/pod1", and the root of this process's cgroup namespace, "/",
// is "/..", outside it.
func (c cgroups) parent() cgroups {
	up := cgroups{}
	for k, p := range c {
		ups, rest := split(p)
		if len(rest) > 0 {
			rest = rest[:len(rest)-1]
		} else {
			ups++
		}
		up[k] = join(ups, rest)
	}
	return up
}

// holds reports whether a process with memberships h is inside c: in
// every hierarchy c is in, h's path is c's or below it. Paths are as
// /proc/PID/cgroup shows them, from the root of this process's cgroup
// namespace: one outside it starts with "/.." (a container's neighbours
// on a cgroup v2 node), and is inside c only when c is that far up too.
// Unlike contains, a c at the root holds every process it sees: a server
// at the host's root serves whatever it sees.
func (c cgroups) holds(h cgroups) bool {
	for k, p := range c {
		hp, ok := h[k]
		if !ok || !within(hp, p) {
			return false
		}
	}
	return true
}

// within reports whether cgroup path hp is p or below it.
func within(hp, p string) bool {
	hu, hr := split(hp)
	pu, pr := split(p)
	if len(pr) == 0 { // p is the namespace's root or above it
		return hu <= pu
	}
	return hu == pu && len(hr) >= len(pr) && slices.Equal(hr[:len(pr)], pr)
}

// split reads a cgroup path as the number of ".." it starts with (how far
// above the namespace's root) and the names that follow.
func split(p string) (ups int, rest []string) {
	for _, seg := range strings.Split(strings.Trim(p, "/"), "/") {
		switch {
		case seg == "":
		case seg == ".." && len(rest) == 0:
			ups++
		default:
			rest = append(rest, seg)
		}
	}
	return ups, rest
}

// join is the path split reads as ups and rest.
func join(ups int, rest []string) string {
	return "/" + strings.Join(append(slices.Repeat([]string{".."}, ups), rest...), "/")
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

// charNums maps the char device number sysfs shows for each of devs
// (those with a char device) to its ID, and says which numbers it could
// not read: a device whose char device is gone from sysfs (deleted since)
// is left out with no error, one whose number cannot be read or parsed is
// left out with one.
func charNums(sysRoot string, devs []Device) (map[blockdev.DevNum]int, error) {
	chars := map[blockdev.DevNum]int{}
	var errs []error
	for _, d := range devs {
		if !d.Char {
			continue
		}
		b, err := os.ReadFile(filepath.Join(sysRoot, charClassDir, d.CharName(), "dev"))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted since: served by no one
		}
		n, perr := blockdev.ParseDevNum(strings.TrimSpace(string(b)))
		if err != nil || perr != nil {
			errs = append(errs, fmt.Errorf("ublk: %s's device number: %w", d.CharName(), cmp.Or(err, perr)))
			continue
		}
		chars[n] = d.ID
	}
	return chars, errors.Join(errs...)
}

// daemonServes returns the IDs of devs whose /dev/ublkcN the process pid
// (the daemon) has open or mapped, each with how ("open in", "mapped by"),
// or why it cannot tell: a char device's number not read from sysfs,
// pid's fd directory or maps not read (EMFILE or ENOMEM in the server,
// EACCES; the maps not within blockdev.MapsWait), a mapping not typed, or
// ctx ending before every fd was read. The mappings count: a server maps
// its /dev/ublkcN while it serves, and may close its fd (the driver needs
// none for the mapping, nor for the commands of an io_uring with the
// device among its registered files). A fd directory that does not exist
// is an error wrapping fs.ErrNotExist: the process exited, or procfs does
// not show it (mounted with hidepid=invisible, or another PID
// namespace's), which the caller tells apart by the daemon's own exit.
func daemonServes(ctx context.Context, sysRoot, procRoot string, devs []Device, pid int) (map[int]string, error) {
	chars, err := charNums(sysRoot, devs)
	if err != nil {
		return nil, err
	}
	if len(chars) == 0 {
		return nil, nil
	}
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	open, mapped, complete, err := blockdev.ReadCharsHeld(ctx, dir, wantSet(chars))
	switch {
	case err != nil:
		return nil, fmt.Errorf("ublk: the daemon's fds and mappings: %w", err)
	case !complete:
		return nil, fmt.Errorf("ublk: the daemon's fds not all read by %s's deadline: %w", filepath.Join(dir, "fd"), ctx.Err())
	}
	served := make(map[int]string, len(open)+len(mapped))
	for _, n := range open {
		served[chars[n]] = "open in"
	}
	for _, n := range mapped {
		served[chars[n]] = "mapped by"
	}
	return served, nil
}

// ublkServers returns, of pids, the processes that have the char device
// /dev/ublkcN of one of devs open or mapped, each with the IDs of those
// devices, those open first, in the order of its fds: the driver lets
// only a device's server open it, so such a process is the daemon, or a
// part of it (a per-device server it forked), whether the step knows its
// PID or not. Its fds and mappings are read (blockdev.ReadCharsHeld: a
// server maps its /dev/ublkcN while it serves, and may close the fd),
// until ctx ends. It also returns, with why, the processes it cannot tell
// are not servers: one whose fd directory or maps it could not read
// (EACCES, EMFILE or ENOMEM in the server; the maps not within
// blockdev.MapsWait; a mapping not typed; a process that exited serves
// none), one it did not read by ctx's end, and, when a char
// device's number could not be read from sysfs, every process not found
// to be a server (it may serve that device). Taken for one with none
// open, such a process was a holder the last resort could SIGKILL, a ublk
// server with a live device among them: the host-crash path.
func ublkServers(ctx context.Context, sysRoot, procRoot string, devs []Device, pids []int) (servers map[int][]int, unknown map[int]error) {
	chars, numErr := charNums(sysRoot, devs)
	servers, unknown = map[int][]int{}, map[int]error{}
	if len(chars) == 0 {
		if numErr != nil { // each may serve a device whose number was not read
			for _, pid := range pids {
				unknown[pid] = numErr
			}
		}
		return servers, unknown
	}
	want := wantSet(chars)
	for i, pid := range pids {
		open, mapped, complete, err := blockdev.ReadCharsHeld(ctx, filepath.Join(procRoot, strconv.Itoa(pid)), want)
		for _, n := range slices.Concat(open, mapped) {
			servers[pid] = append(servers[pid], chars[n])
		}
		switch {
		case len(servers[pid]) > 0: // a server, whatever else was not read
		case exited(err): // exited: serves none
		case err != nil:
			unknown[pid] = fmt.Errorf("its fds or mappings not read: %w", err)
		case !complete:
			for _, p := range pids[i:] {
				if len(servers[p]) == 0 {
					unknown[p] = fmt.Errorf("its fds not read by the end of the last resort's part of the reserve: %w", context.Cause(ctx))
				}
			}
			return servers, unknown
		case numErr != nil:
			unknown[pid] = numErr
		}
	}
	return servers, unknown
}
