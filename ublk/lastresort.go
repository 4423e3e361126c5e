package ublk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/drainkit/drainkit/internal/blockdev"
	"github.com/drainkit/drainkit/internal/bounded"
	"github.com/drainkit/drainkit/internal/procstat"
	"github.com/drainkit/drainkit/internal/ublkctl"
)

// HolderFate is what the last-resort sequence decided for one holder that
// still had a disk open when only the time for the sequence was left.
type HolderFate struct {
	Holder Holder `json:"holder"`
	// Device is the ublk device ID the holder held.
	Device int `json:"device"`
	// Cgroup is the holder's cgroup as /proc/PID/cgroup shows it, one
	// "hierarchy:path" per line joined with ";" (empty when unreadable).
	Cgroup string `json:"cgroup,omitempty"`
	// Doomed is true when the holder is inside the server's own cgroup, so
	// the pod's SIGKILL ends it a few seconds later anyway.
	Doomed bool `json:"doomed"`
	// Killed is true when the step killed it (SIGKILL through a pidfd) and
	// saw it exit.
	Killed bool `json:"killed"`
	// Signalled is true when the step sent it SIGKILL, its exit seen
	// (Killed) or not. One whose exit was not seen by the end of the last
	// resort's part of the reserve no longer keeps a disk from stopping
	// all the same: it runs no more code, the daemon still serves the I/O
	// it has in flight, and waiting for it would leave the daemon to the
	// pod's SIGKILL with the disk live.
	Signalled bool `json:"signalled"`
	// StartTime is when the process started, /proc/PID/stat's field 22
	// (clock ticks after boot), read once it was pinned by its pidfd; zero
	// when not read. With the PID, which the kernel gives to another
	// process once this one is reaped, it names the process: a process
	// sent SIGKILL has it (the SIGKILL reached the process it was read
	// from, not yet reaped then), and a scan after the kill that lists
	// its PID holding a disk is read as that process only while the PID's
	// process started then.
	StartTime uint64 `json:"start_time,omitempty"`
	// Reason says why it was killed or spared.
	Reason string `json:"reason"`
	Err    string `json:"error,omitempty"`

	// released is true when the check before its SIGKILL found that the
	// process holds no disk any more: it had exited, or a read once it
	// was pinned shows it holds none. What a scan before saw it hold at
	// its PID is gone: that process, or one gone since.
	released bool
	// aside is true for a possible holder the last resort does not kill
	// and no longer waits for (set aside): its Reason then ends with what
	// becomes of the disk (asideFate), known once the last resort has
	// stopped what it may.
	aside bool
	// serves is true for a ublk server of the step's device spared when
	// no daemon is configured: its Reason then ends with what becomes of
	// the disk (asideFate), as a possible holder's set aside does.
	serves bool
}

// LastResortReport is what the last-resort sequence did: on a kernel that
// is not known fixed, with holders left at the point where only the time
// for the sequence remained, it killed the holders inside the server's
// cgroup (doomed anyway), stopped the devices through /dev/ublk-control and
// let the daemon exit, all before SIGKILL.
type LastResortReport struct {
	// At is when the sequence started.
	At time.Time `json:"at"`
	// ServerCgroup is the cgroup of the process running the step, in the
	// same form as HolderFate.Cgroup.
	ServerCgroup string `json:"server_cgroup,omitempty"`
	// Holders has one entry per holder process (or mount, swap, stacked
	// device) seen at At: killed, or spared and why.
	Holders []HolderFate `json:"holders"`
}

// Killed returns the holders the sequence killed and saw exit.
func (r *LastResortReport) Killed() []HolderFate {
	return r.fates(func(h HolderFate) bool { return h.Killed })
}

// Spared returns the holders the sequence left alive: those it sent no
// SIGKILL.
func (r *LastResortReport) Spared() []HolderFate {
	return r.fates(func(h HolderFate) bool { return !h.Signalled && !h.Killed })
}

// Dying returns the holders the sequence sent SIGKILL and did not see
// exit before the end of its part of the reserve (see
// HolderFate.Signalled).
func (r *LastResortReport) Dying() []HolderFate {
	return r.fates(func(h HolderFate) bool { return h.Signalled && !h.Killed })
}

func (r *LastResortReport) fates(keep func(HolderFate) bool) []HolderFate {
	var out []HolderFate
	for _, h := range r.Holders {
		if keep(h) {
			out = append(out, h)
		}
	}
	return out
}

// runLastResort is the last resort, run at the last-resort point with
// holders left, inside its window (run.plan): kill the doomed holders
// (one SIGKILLed whose exit its window was too short to see counts as
// killed here), STOP_DEV every device no holder is left on while the
// daemon still serves it, and return the devices still held (nil when none is: the daemon may
// then be asked to stop, and its exit is safe). This process's own holds
// do not keep a device from stopping: it is the server, and it asked for
// the stop (its fds, its mappings, its rings and what it may hold alike).
// Nor do the daemon's, when its process is known: it is the server too,
// asking it to stop releases them, and killing it is the host-crash path
// the step exists to avoid. Without the control device the daemon's own
// stop does the STOP_DEV once it is asked.
func (r *run) runLastResort(held map[int][]Holder) map[int][]Holder {
	s := r.stepStart("last resort")
	ctx, cancel := r.stageCtx(r.ctx, lastResortEnd)
	defer cancel()
	lr := &LastResortReport{At: s.Start}
	r.rep.LastResort = lr
	servers, spared, killable, untold, foreign := r.sparedServers(ctx, held)
	kctx, kcancel := r.killWindow(ctx)
	defer kcancel()
	lr.ServerCgroup, lr.Holders = r.cfg.killHolders(kctx, r.cfg.procRoot, killable, r.devNums, daemonPID(r.cfg.daemon))
	lr.Holders = append(lr.Holders, spared...)
	if lr.Holders == nil {
		lr.Holders = []HolderFate{}
	}
	for _, f := range lr.Holders {
		r.cfg.logger.WarnContext(r.ctx, "ublk: last resort", "holder", f.Holder.String(), "device", f.Device,
			"killed", f.Killed, "doomed", f.Doomed, "cgroup", f.Cgroup, "why", f.Reason, "err", f.Err)
	}
	r.refresh()
	// A killed process's holds went with it, and a process SIGKILLed whose
	// exit the window was too short to see (a large VM's memory takes time
	// to free) runs no more code: its fds close as it exits, and the
	// daemon serves its I/O in flight until then. Neither keeps a disk
	// from stopping, whether a scan still lists it or runs out of time
	// before it (notRead); waiting for its exit past the window would
	// leave the daemon to the pod's SIGKILL with the disk live.
	// The scans before the kill saw the process it signalled at its PID;
	// a scan after it may see another one the PID was given to once the
	// first was reaped, whose holds are its own: it is the signalled one
	// only while the PID's process started when that one did.
	// What the checks before the SIGKILLs found gone (a process that
	// exited, or closed the disk, after the last scan read it) is gone
	// too: kept, it spared the disk when the last resort does not scan
	// again, and the daemon was left to die with it live.
	// A process's own holds only: a mount listed at its PID (the first
	// process a scan read in that mount namespace) is kernel state its
	// death does not release.
	r.lastHeld = dropHolders(r.lastHeld, func(h Holder) bool {
		return isProcess(h) && (signalledFate(lr.Holders, h.PID) != nil || releasedAt(lr.Holders, h.PID))
	})
	left, scanned := r.heldAfterKill()
	self, daemon := os.Getpid(), daemonPID(r.cfg.daemon)
	var others []string // PIDs the SIGKILLed processes had, now another's
	left = dropHolders(left, func(h Holder) bool {
		if !isProcess(h) {
			return false // a mount, swap, a stacked or loop device: no kill releases it
		}
		if h.PID == self || h.PID == daemon && daemon > 0 || len(servers[h.PID]) > 0 {
			return true
		}
		f := signalledFate(lr.Holders, h.PID)
		if f == nil || !scanned {
			return f != nil
		}
		same, now := r.stillSignalled(f)
		if !same {
			if o := fmt.Sprintf("pid %d is another process since its SIGKILL (started at clock tick %d, the one SIGKILLed at tick %d): its holds are its own",
				h.PID, now, f.StartTime); !slices.Contains(others, o) {
				others = append(others, o)
			}
		}
		return same
	})
	left = r.setAsidePossible(left) // what is not known to hold a disk does not keep it from stopping
	stopped, pending, failed, unsent := 0, 0, 0, 0
	free, _ := r.controlled(func(d *devState) bool { return !hasKey(left, d.cur.ID) && d.live() }) // one not known to be the daemon's is its daemon's to stop
	for i, d := range free {
		if r.cfg.openControl == nil || r.openControl() != nil {
			break // the daemon's own stop does it, if it is asked
		}
		if !r.liveToTheDriver(d, lastResortEnd) {
			continue
		}
		var notSent string
		d.stopped, notSent = r.stopDev(d, shareOf(len(free)-i+len(left)))
		switch {
		case notSent != "":
			unsent++
		case d.stopped:
			stopped++
		case slices.Contains(d.pending, "STOP_DEV"):
			pending++ // sent: the kernel runs it on
		default:
			failed++
		}
	}
	left, under := r.stopUnderHolders(ctx, left)
	for i := range lr.Holders {
		if f := &lr.Holders[i]; f.aside || f.serves {
			f.Reason += r.asideFate(f.Device, left)
		}
	}
	result := fmt.Sprintf("%d holder(s) killed, %d spared; STOP_DEV done for %d device(s), sent and not complete for %d, failed for %d; %d device(s) still held",
		len(lr.Killed()), len(lr.Spared()), stopped, pending, failed, len(left))
	if unsent > 0 {
		result += fmt.Sprintf("; STOP_DEV not sent to %d: its ID another device's or free since it was read", unsent)
	}
	if untold > 0 {
		result += fmt.Sprintf("; %d process(es) not known whether a ublk server (what tells one not read), not killed", untold)
	}
	if foreign > 0 {
		result += fmt.Sprintf("; %d ublk server(s) of a device not the step's, not killed", foreign)
	}
	if under != "" {
		result += "; " + under
	}
	if !scanned {
		result += "; not scanned again: its part of the reserve was over, the holders are the last scan's less what it killed"
	}
	if n := len(lr.Dying()); n > 0 {
		result = fmt.Sprintf("%d SIGKILLed with its exit not seen in time (not waited for), ", n) + result
	}
	if len(others) > 0 {
		result += "; " + strings.Join(others, "; ")
	}
	_ = r.stepEnd(s, result, nil)
	if len(left) == 0 {
		return nil
	}
	return left
}

// sparedServers finds, of held's processes, those that are a ublk server
// of one of the step's devices (they have its /dev/ublkcN open:
// ublkServers), and returns them, each with the devices it serves, their
// fates (spared), and held without their holds (a copy): the holders the
// last resort may kill. The last resort
// never kills one, whether the step knows its PID (the daemon) or not (a
// daemon known by its functions or its socket alone, a per-device server
// the daemon forked): killing it with a live device is the host-crash
// path. Like the daemon's, its holds keep no device from stopping:
// asking the daemon to stop releases them. Before, such a server holding
// its own disk was a doomed holder in the server's cgroup like a VMM,
// and SIGKILLed with its device live.
//
// A process it cannot tell is not a server (its fds, or a char device's
// number, not read: ublkServers) is spared too, its fate saying why, and
// counted in untold: "cannot tell" means do not kill, as for the daemon
// (Daemon.CannotTell). Not known to be a server, its holds stand like a
// spared holder's: the device stays held, or is stopped under it
// (stopUnderHolders). Before, it was taken for a process with no
// /dev/ublkcN open, and SIGKILLed when doomed.
//
// So is the server of a ublk device in sysfs that is not the step's (one
// Config.Devices leaves out, another server's), counted in others: it is
// a ublk server all the same, and killing it with that device live is
// the host-crash path; not the daemon, asking the daemon to stop does not
// release what it holds, so its holds stand as a spared holder's. When
// sysfs's devices cannot all be read, a process not found a server may
// serve one not read, and is not known either. Before, only the step's
// devices' char devices were looked for, and such a server holding the
// step's disk was SIGKILLed as a doomed VMM.
func (r *run) sparedServers(ctx context.Context, held map[int][]Holder) (servers map[int][]int, spared []HolderFate, rest map[int][]Holder, untold, others int) {
	var pids []int
	for _, hs := range held {
		for _, h := range hs {
			if isProcess(h) && h.PID > 0 && !slices.Contains(pids, h.PID) {
				pids = append(pids, h.PID)
			}
		}
	}
	devs := make([]Device, 0, len(r.dev))
	for _, d := range r.dev {
		devs = append(devs, d.cur)
	}
	devs, listErr := r.withUntracked(devs)
	if ctx.Err() != nil {
		// The window was over before the look began (the holder wait's
		// last scan ran past it on a slow procfs). The look gets the slack
		// the last resort's reads have (readWithin): cut short at once, it
		// read no process's fds, found no server, and a ublk server holding
		// its disk was SIGKILLed as a doomed holder, its device live.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), readSlack)
		defer cancel()
	}
	servers, unknown := ublkServers(ctx, r.cfg.sysRoot, r.cfg.procRoot, devs, pids)
	foreign := map[int]int{} // servers of a device not the step's, to that device
	for pid, ids := range servers {
		if !slices.ContainsFunc(ids, func(id int) bool { return r.tracks(id, true) }) {
			foreign[pid] = ids[0]
			delete(servers, pid)
		}
	}
	if listErr != nil {
		for _, pid := range pids {
			if len(servers[pid]) == 0 && unknown[pid] == nil && !hasKey(foreign, pid) {
				unknown[pid] = fmt.Errorf("the ublk devices in sysfs not all read, it may serve one: %w", listErr)
			}
		}
	}
	for id, hs := range held {
		for _, h := range hs {
			if !isProcess(h) {
				continue
			}
			if sid, ok := foreign[h.PID]; ok {
				spared = append(spared, HolderFate{Holder: h, Device: id, Reason: "a ublk server of a device that is not the step's: it has /dev/ublkc" +
					strconv.Itoa(sid) + " open, which the driver lets only the device's server open; killing it with that device live is the " +
					"host-crash path, and not the daemon, it does not stop when the daemon is asked to: what it holds stands"})
			} else if ids := servers[h.PID]; len(ids) > 0 {
				spared = append(spared, r.serverFate(h, id, ids[0]))
			} else if err := unknown[h.PID]; err != nil {
				spared = append(spared, HolderFate{Holder: h, Device: id, Err: err.Error(), Reason: "not known whether it is a ublk server " +
					"(whether it has a /dev/ublkcN of the step's devices open could not be read): not killed, since killing a server with a live device " +
					"is the host-crash path; what it holds stands"})
			}
		}
	}
	rest = make(map[int][]Holder, len(held))
	for id, hs := range held {
		rest[id] = slices.Clone(hs) // dropHolders edits the slices in place, and held's are the last scan's
	}
	rest = dropHolders(rest, func(h Holder) bool {
		return isProcess(h) && (len(servers[h.PID]) > 0 || unknown[h.PID] != nil || hasKey(foreign, h.PID))
	})
	return servers, spared, rest, len(unknown), len(foreign)
}

// serverFate is the fate of h, a ublk server of the step's device sid
// holding device id: spared, its holds keeping no disk from stopping.
// With a daemon, asking it to stop releases them. With none configured
// (New's nil) nothing asks the server anything: its Reason then ends
// with what becomes of the disk (serves), known once the last resort
// has stopped what it may. Before, it said the daemon's stop released
// its holds where no daemon was asked, beside a disk nothing stopped.
func (r *run) serverFate(h Holder, id, sid int) HolderFate {
	why := "a ublk server: it has /dev/ublkc" + strconv.Itoa(sid) + " open, which the driver lets only the device's server open; " +
		"killing it with a live device is the host-crash path, and "
	if r.cfg.daemon == nil {
		return HolderFate{Holder: h, Device: id, serves: true, Reason: why + "no daemon is configured to ask to stop: nothing asks it to release its holds, " +
			"which do not keep the disk from stopping"}
	}
	return HolderFate{Holder: h, Device: id, Reason: why + "asking the daemon to stop releases its holds"}
}

// liveToTheDriver asks the driver about d (GET_DEV_INFO, bounded by
// until) before the last resort's STOP_DEV of it, the step's first
// control command to it, and reports whether it may still be live: not
// when the driver has no such device (goneFromDriver) or says it DEAD
// with no disk in sysfs. The question goes first because ublkctl.Control
// sends the first command it gets an answer to again with its plain
// number when the kernel refused its ioctl-encoded one as unknown (6.1.43
// to 6.3, and vendor kernels of that ublk age, which the kernel table
// counts vulnerable: the last resort runs there), and a device deleted
// and another added under its ID between the two sends gets the second:
// a GET_DEV_INFO so sent reads it, a STOP_DEV stopped it. A GET_DEV_INFO
// that failed tells nothing, and the STOP_DEV goes all the same.
func (r *run) liveToTheDriver(d *devState, until func(*stages) time.Time) bool {
	start := time.Now()
	var info ublkctl.DevInfo
	err := r.within(until, func(ctx context.Context) (err error) {
		info, err = r.ctl.DevInfo(ctx, d.cur.ID)
		return err
	})
	switch {
	case errors.Is(err, syscall.ENODEV):
		r.goneFromDriver(d, start, err)
		return false
	case err != nil:
		r.infoNotRead(d, start, err)
		return true
	}
	if d.rep.Info == nil {
		d.rep.Info = driverInfo(info) // the state before the step acted
	}
	d.dead = info.State == ublkctl.StateDead
	return d.live()
}

// whyStopUnderHolders says why a held device whose daemon dies at the
// pod's SIGKILL (why says how that is known) is stopped under its
// holders. A device with UBLK_F_USER_RECOVERY, kept live, would be
// quiesced for the next server when its daemon dies; but the driver
// reaches that through the same cancel of the daemon's commands as any
// device (ublk_uring_cmd_cancel_fn, then ublk_cancel_cmd), the crash
// race f40139fde527 fixed (6.7 until 6.14.6 and 6.15), and the last
// resort runs only on a kernel not known fixed. So its recovery is given
// up for the host, and the step says so. Before, it was kept "for the
// next server" and its daemon was left for the pod's SIGKILL with it live.
func (r *run) whyStopUnderHolders(info ublkctl.DevInfo, why string) string {
	if info.Flags&ublkctl.FlagUserRecovery == 0 {
		return "no UBLK_F_USER_RECOVERY, and " + why + ": the disk goes with the daemon then, so it is stopped now, while the daemon serves it"
	}
	return "UBLK_F_USER_RECOVERY given up: " + why + ", and on this kernel (" + string(r.t.class) +
		") the daemon's death with the device live runs the driver's cancel path, recovery or not (the host-crash race), so it is stopped now, while the daemon serves it: no next server recovers it"
}

// withUntracked returns devs with every ublk device sysfs shows that the
// step has no device for and that has a char device (one left out by
// Config.Devices, another server's): a process with its /dev/ublkcN open
// is its server, which the last resort must not kill either. The error
// says what of sysfs was not read.
func (r *run) withUntracked(devs []Device) ([]Device, error) {
	more, err := r.untrackedDevices()
	for _, d := range more {
		if d.Char {
			devs = append(devs, d)
		}
	}
	return devs, err
}

func hasKey[K comparable, V any](m map[K]V, k K) bool {
	_, ok := m[k]
	return ok
}

// stopUnderHolders STOP_DEVs, while the daemon still serves them, the
// devices left held by what the last resort may not release (kernel
// state, a holder outside the server's cgroup, one it spared), when the
// daemon dies at the pod's SIGKILL (daemonDoomed): the kernel stops a
// device without UBLK_F_USER_RECOVERY when its daemon dies, failing its
// I/O, so its holders lose the disk at SIGKILL either way; stopped now,
// its I/O in flight completes and the daemon can exit with no live device
// instead of dying with one, the host-crash path. A device with
// UBLK_F_USER_RECOVERY is stopped too: the last resort runs only on a
// kernel not known fixed, where its daemon's death with it live runs the
// same cancel path (whyStopUnderHolders). One whose daemon may outlive the
// pod keeps being served, live and held. It returns the devices still
// held and what it did, for the last resort's step ("" when nothing).
func (r *run) stopUnderHolders(ctx context.Context, left map[int][]Holder) (map[int][]Holder, string) {
	if len(left) == 0 || r.cfg.openControl == nil || r.openControl() != nil {
		return left, ""
	}
	doomed, why := r.cfg.daemonDoomed(ctx, r.cfg.procRoot, daemonPID(r.cfg.daemon))
	if !doomed {
		return left, "held devices left live: " + why
	}
	var kept []string
	sent := 0 // STOP_DEVs sent and not seen complete
	heldLive, untold := r.controlled(func(d *devState) bool { return hasKey(left, d.cur.ID) && d.live() })
	for _, d := range untold {
		kept = append(kept, d.cur.DiskName()+" (not known to be the daemon's: "+d.untold+")")
	}
	for i, d := range heldLive {
		hs := left[d.cur.ID]
		var info ublkctl.DevInfo
		start := time.Now()
		err := r.within(lastResortEnd, func(ctx context.Context) (err error) {
			info, err = r.ctl.DevInfo(ctx, d.cur.ID)
			return err
		})
		if errors.Is(err, syscall.ENODEV) {
			delete(left, d.cur.ID) // gone: its holders hold nothing of it
			r.goneFromDriver(d, start, err)
			continue
		}
		if err != nil {
			kept = append(kept, fmt.Sprintf("%s (its flags not read: %v)", d.cur.DiskName(), err))
			continue
		}
		if d.rep.Info == nil {
			d.rep.Info = driverInfo(info) // the state before the step acted
		}
		d.rep.Steps = append(d.rep.Steps, StepResult{Name: stepStopUnderHolders, Start: time.Now(),
			Result: heldText(map[int][]Holder{d.cur.ID: hs}) + "; " + r.whyStopUnderHolders(info, why)})
		r.cfg.logger.WarnContext(r.ctx, "ublk: last resort: stopping a device still held", "device", d.cur.DiskName(),
			"holders", fmt.Sprint(hs), "why", why)
		var notSent string
		d.stopped, notSent = r.stopDev(d, shareOf(len(heldLive)-i))
		if notSent != "" {
			kept = append(kept, d.cur.DiskName()+" (STOP_DEV not sent: "+notSent+")")
			continue
		}
		if !d.stopped && !slices.Contains(d.pending, "STOP_DEV") {
			kept = append(kept, d.cur.DiskName()+" (STOP_DEV failed)")
			continue // the daemon keeps serving it
		}
		if !d.stopped {
			sent++
		}
		if r.stoppedHeld == nil {
			r.stoppedHeld = map[int][]Holder{}
		}
		r.stoppedHeld[d.cur.ID] = hs
		delete(left, d.cur.ID)
	}
	result := fmt.Sprintf("%d held device(s) stopped under their holders", len(r.stoppedHeld)-sent)
	if sent > 0 {
		// Sent, its completion not seen: the disk is gone from sysfs (its
		// holders lost it), but the device stops only once the daemon has
		// answered its I/O in flight, which a hung one never does.
		result += fmt.Sprintf(", STOP_DEV sent and not complete for %d", sent)
	}
	result += " (" + why + ")"
	if len(kept) > 0 {
		result += "; left live: " + strings.Join(kept, ", ")
	}
	if len(left) == 0 {
		left = nil
	}
	return left, result
}

// asideFate says what becomes of device id's disk, a possible holder of
// which the last resort set aside, once it has stopped what it may (left:
// the devices still held): it stops all the same when the last resort
// stopped it or the daemon is asked to stop (no device is left held, and
// a daemon is configured), and is not stopped when something else still
// holds it, when other devices still held keep the daemon from being
// asked (HeldError) and the last resort did not stop it, when there is no
// daemon to ask and the last resort did not stop it (no control device,
// or its STOP_DEV failed: the fallback alone may stop it then), or when
// it is not known to be the daemon's (the control does not stop it: see
// controlled). A STOP_DEV the last resort sent and did not see complete
// is said to be sent: the disk stops only once the daemon answers its
// I/O in flight, which a hung daemon never does. Before, every one said
// "the disk stops all the same", and a disk the control left live,
// another server's among them, was said to stop; so were, until rows
// 1300-1301, one that no daemon and no control device would stop, and
// one whose STOP_DEV a hung daemon kept from completing.
func (r *run) asideFate(id int, left map[int][]Holder) string {
	d := r.device(id)
	switch {
	case d == nil:
		return ", the disk stops all the same" // gone already
	case d.untold != "":
		return "; but " + d.cur.DiskName() + " is not known to be the daemon's (the procfs pass did not tell it from another server's in time): " +
			"the control does not stop it, its own server alone may"
	case hasKey(left, id):
		return ", but the disk is still held by what the last resort does not release: not stopped"
	case !d.live() || d.stopped:
	case slices.Contains(d.pending, "STOP_DEV"):
		return "; its STOP_DEV sent, not seen complete in the last resort's part: the kernel runs it on, and the disk stops only once the daemon has answered its I/O in flight"
	case left != nil:
		return ", but the disk is not stopped: the devices still held keep the daemon from being asked to stop, and the last resort did not stop it"
	case r.cfg.daemon == nil && r.ctl == nil:
		return ", but the disk is not stopped: no daemon is configured to ask to stop, and no control device (" + r.noControl() + ")"
	case r.cfg.daemon == nil:
		return ", but the last resort did not stop the disk: no daemon is configured to ask to stop, and its STOP_DEV failed; the control fallback alone may stop it, at its point"
	}
	return ", the disk stops all the same"
}

// noControl says why the step has no control device: Config.NoControl,
// or the error opening it.
func (r *run) noControl() string {
	if r.ctlErr != nil {
		return "not opened: " + r.ctlErr.Error()
	}
	return "Config.NoControl"
}

// stepStopUnderHolders names the device step that says why the last
// resort stopped a device still held (stopUnderHolders).
const stepStopUnderHolders = "stop under holders"

// signalledFate returns the fate of the process at pid the last resort
// sent SIGKILL, nil when it sent pid none.
func signalledFate(fates []HolderFate, pid int) *HolderFate {
	if pid <= 0 {
		return nil
	}
	i := slices.IndexFunc(fates, func(f HolderFate) bool { return (f.Signalled || f.Killed) && f.Holder.PID == pid })
	if i < 0 {
		return nil
	}
	return &fates[i]
}

// releasedAt reports whether the last resort's check found the process
// at pid holding no disk any more (HolderFate.released).
func releasedAt(fates []HolderFate, pid int) bool {
	return pid > 0 && slices.ContainsFunc(fates, func(f HolderFate) bool { return f.released && f.Holder.PID == pid })
}

// stillSignalled reports whether the process procfs shows at f's PID now
// is the one f sent SIGKILL (it started when that one did), or there is
// none: a scan that lists the PID holding a disk then saw the process
// that runs no more code, or one gone since. One that started at another
// time (now) got the PID once the signalled one was reaped, and holds
// what it holds. A stat that cannot be read for another reason does not
// tell it from the signalled one.
func (r *run) stillSignalled(f *HolderFate) (same bool, now uint64) {
	start, err := startTime(r.ctx, r.cfg.procRoot, f.Holder.PID)
	return err != nil || start == f.StartTime, start
}

// startTime reads when the process at pid started, /proc/PID/stat's field
// 22, from procRoot, giving up at ctx's end (readWithin).
func startTime(ctx context.Context, procRoot string, pid int) (uint64, error) {
	b, err := readWithin(ctx, filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	st, err := procstat.Parse(b)
	return st.StartTime, err
}

// heldAfterKill is what holds the disks once the last resort has killed
// what it could: a new scan's findings while its part of the reserve
// lasts (scanned), with a control device to send its STOP_DEVs through
// only the first half of what is left of it (sendFloor), and once that is
// over, the last scan's, less what the kill released (r.lastHeld), less
// the devices gone since (onDisks, as the scan does). A scan then would
// read no process, only list procfs and sysfs, right before the daemon's
// stop, and its Report would say every process was not read for want of
// time, where none was tried.
func (r *run) heldAfterKill() (held map[int][]Holder, scanned bool) {
	from := time.Now()
	end := lastResortEnd
	if r.cfg.openControl != nil && r.openControl() == nil {
		end = sendFloor(from)
	}
	if from.Before(end(&r.stages)) {
		held, _ = r.scanHolders(end) // a failure is logged; the holders step's Report has the first
		r.noteHolders(held)
		return held, true
	}
	held = make(map[int][]Holder, len(r.lastHeld))
	for id, hs := range r.lastHeld {
		held[id] = slices.Clone(hs) // dropHolders edits the slices in place
	}
	return r.onDisks(held), false
}

// killWindow is the context of the last resort's kill (its checks, the
// SIGKILLs, the wait for the exits): ctx, the last resort's, ending
// halfway from now to the end of its part when it has a control device
// (sendFloor), the other half its scan's and its STOP_DEVs'. A holder
// SIGKILLed and not seen exiting by then runs no more code, and keeps no
// disk from stopping, as one seen exiting. Before, the wait took the part
// to its end for a holder that does not exit in it (blocked in the
// kernel, freeing a large VM's memory), and the STOP_DEVs were sent past
// it, their windows over (docs/faults.md row 3603).
func (r *run) killWindow(ctx context.Context) (context.Context, context.CancelFunc) {
	if r.cfg.openControl == nil || r.openControl() != nil {
		return ctx, func() {}
	}
	return r.stageCtx(ctx, sendFloor(time.Now()))
}

// sendFloor is where the last resort's scan after the kill, begun at
// from, stops reading procfs: halfway from then to the end of the last
// resort's part (as Tighten moves it). The other half is the STOP_DEVs'
// of the devices the kill freed, and of those stopped under their
// holders, each a GET_DEV_INFO and a STOP_DEV sent in turn. Before, the
// scan had the part to its end, and on a loaded node (355 processes,
// 1.15 s in the VM) it took all of it: the STOP_DEVs were sent past the
// part, each with its window over, into the daemon's own stop's part
// (docs/faults.md row 3401).
func sendFloor(from time.Time) func(*stages) time.Time {
	return func(s *stages) time.Time {
		return from.Add(s.lastResort.Deadline.Sub(from) / 2)
	}
}

// shareOf is the end of a STOP_DEV the last resort sends now, with n
// (itself included) still to send in turn: an even share of what is
// left of its part (as Tighten moves it). A STOP_DEV completes once the
// daemon has answered the device's I/O in flight, never for a hung
// daemon: given the part to its end, it left the devices after it no
// window, their STOP_DEVs sent with it over (docs/faults.md row 3602).
// One not complete in its share is pending, the kernel running it on;
// the time a prompt one leaves flows to the next.
func shareOf(n int) func(*stages) time.Time {
	from := time.Now()
	return func(s *stages) time.Time {
		return from.Add(s.lastResort.Deadline.Sub(from) / time.Duration(max(n, 1)))
	}
}

// isProcess reports whether h is a process that holds the disk itself (an
// open fd, a mapping of the node, or an io_uring with the node among its
// registered files) or may (a possible holder), so its exit releases the
// disk: the holders the last resort may kill. Mounts, swap, stacked and
// loop devices are kernel state that no kill releases.
func isProcess(h Holder) bool {
	return h.Kind == blockdev.FD || h.Kind == blockdev.Mapped || h.Kind == blockdev.Ring || h.Kind == blockdev.Possible
}

// daemonPID is the daemon's process ID when the step knows its process (a
// *Process, a *Socket paired with one, DaemonFuncs with a PidFunc), 0
// otherwise.
func daemonPID(d Daemon) int {
	switch d := d.(type) {
	case DaemonFuncs:
		return max(d.Pid(), 0)
	case *DaemonFuncs:
		if d != nil {
			return max(d.Pid(), 0)
		}
	case *Process:
		if d != nil {
			return d.Pid()
		}
	case *Socket:
		if d != nil && d.Process != nil {
			return d.Process.Pid()
		}
	}
	return 0
}

// readWithin reads the file at path, giving up readSlack after ctx's end
// (bounded.Call) with an error wrapping ctx's. The kernel serves
// /proc/PID/cgroup behind its cgroup locks, which a node busy creating and
// deleting cgroups can keep taken: a read with no bound held the last
// resort, the daemon's stop and every other holder's fate behind it. The
// slack lets a prompt read through when the window is already over: a
// doomed holder still gets its SIGKILL then, as it did when the reads had
// no bound. A read given up goes on in the background to its end, its
// result dropped: it changes nothing.
func readWithin(ctx context.Context, path string) ([]byte, error) {
	b, err := bounded.Call(ctx, readSlack, func(context.Context) ([]byte, error) { return os.ReadFile(path) })
	if errors.Is(err, bounded.ErrAbandoned) {
		return nil, fmt.Errorf("read %s: %w (%w)", path, err, context.Cause(ctx))
	}
	return b, err
}

// readSlack is how long past its context readWithin waits for a read: a
// procfs read takes microseconds when no lock holds it.
const readSlack = 20 * time.Millisecond
