package ublk

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/drainkit/drainkit/internal/ublkctl"
)

// Verdict is the outcome for one device, or for the whole step. Its values
// are snake_case identifiers, the same in the Report's JSON, the span
// attribute drainkit.ublk.verdict and the metrics' attribute of that name;
// the constants' comments say what each means.
type Verdict string

const (
	// VerdictNothingToDo: no ublk device and no daemon running (or not
	// Linux).
	VerdictNothingToDo Verdict = "nothing_to_do"
	// VerdictStopped: the daemon stopped and deleted the device.
	VerdictStopped Verdict = "stopped"
	// VerdictAbsent: the device, listed in Config.Devices, was not in
	// sysfs at any of the step's reads: nothing of it was seen, waited
	// for or stopped. A listed ID that is not the daemon's (a stale or
	// wrong list) leaves the daemon's real devices out of the step.
	VerdictAbsent Verdict = "absent"
	// VerdictStoppedByControl: the device was stopped (and deleted when
	// possible) through /dev/ublk-control.
	VerdictStoppedByControl Verdict = "stopped_by_control"
	// VerdictHeld: a process still held the device open, so the daemon was
	// not asked to stop.
	VerdictHeld Verdict = "held"
	// VerdictLeftLive: the device is still live on a vulnerable kernel;
	// the daemon was left running because killing it is unsafe.
	VerdictLeftLive Verdict = "left_live"
	// VerdictKilled: the daemon was killed on a kernel where that is safe;
	// the device is left (dead or quiesced) for the next start.
	VerdictKilled Verdict = "killed"
	// VerdictOrphaned: the daemon exited (crashed) and left the device.
	VerdictOrphaned Verdict = "orphaned"
	// VerdictNotStopped: the device was still there at the deadline for
	// another reason (for example a daemon that cannot be killed).
	VerdictNotStopped Verdict = "not_stopped"
)

// StepResult is one action of the step: what, when, how long, and how it
// went.
type StepResult struct {
	Name     string        `json:"name"`
	Start    time.Time     `json:"start"`
	Duration time.Duration `json:"duration_ns"`
	// Result says what happened ("3 holders", "disk removed"), Err why it
	// failed; both may be empty.
	Result string `json:"result,omitempty"`
	Err    string `json:"error,omitempty"`
}

// DeviceReport is everything the step saw and did for one device.
type DeviceReport struct {
	ID int `json:"id"`
	// Initial and Final are the device as sysfs showed it at the start and
	// at the end of the step; when the reads at the end failed, Final is
	// the last one read, and Report.Note and the step's error say since
	// when and why.
	Initial Device `json:"initial"`
	Final   Device `json:"final"`
	// Info is the driver's view (GET_DEV_INFO) when the control fallback
	// ran and could read it, before it acted.
	Info *DriverInfo `json:"info,omitempty"`
	// InflightBefore is the disk's in-flight I/O at the start.
	// InflightAfter is zero once the device is known stopped (gone, DEAD,
	// or STOP_DEV completed: every request was answered); otherwise it is
	// the last value read while the disk was in sysfs (the kernel removes
	// the disk's sysfs entry before STOP_DEV has drained it).
	InflightBefore Inflight `json:"inflight_before"`
	InflightAfter  Inflight `json:"inflight_after"`
	// Holders are every holder seen while waiting for the device to be
	// closed.
	Holders []Holder     `json:"holders,omitempty"`
	Steps   []StepResult `json:"steps,omitempty"`
	// Pending are the control commands (STOP_DEV, DEL_DEV) the step sent
	// for the device whose completion it had not seen when it ended: the
	// driver does not cancel them, and runs them on after the step. The
	// device may then stop, or go, after the step returned: Final and
	// Verdict are what was known when it ended.
	Pending []string `json:"pending,omitempty"`
	Verdict Verdict  `json:"verdict"`
}

// DriverInfo is the driver's own account of a device (GET_DEV_INFO), where
// sysfs (Device) shows only which of its files exist.
type DriverInfo struct {
	// State is "dead", "live", "quiesced" (its daemon is gone and a new
	// one may recover it), "fail_io" (its daemon is gone and I/O fails at
	// once), or "state(N)" for a state this package does not know.
	State string `json:"state"`
	// ServerPID is the daemon the driver serves the device through; the
	// driver keeps it after that daemon exited.
	ServerPID int `json:"ublksrv_pid"`
	// Flags are the UBLK_F_* flags the device was added with;
	// UBLK_F_USER_RECOVERY (1<<3) lets a new daemon take the device over.
	Flags uint64 `json:"flags"`
	// Queues and QueueDepth are the device's hardware queues and the depth
	// of each.
	Queues     int `json:"nr_hw_queues"`
	QueueDepth int `json:"queue_depth"`
}

// driverInfo is the public account of what GET_DEV_INFO returned.
func driverInfo(i ublkctl.DevInfo) *DriverInfo {
	return &DriverInfo{State: i.State.String(), ServerPID: int(i.ServerPID), Flags: i.Flags,
		Queues: int(i.NrHWQueues), QueueDepth: int(i.QueueDepth)}
}

// DaemonReport says what happened to the daemon.
type DaemonReport struct {
	// Present is false when the step had no daemon to stop.
	Present bool `json:"present"`
	// Requested is true when the stop request was delivered: answered,
	// or sent and unanswered while the daemon ran on (Unconfirmed).
	Requested bool `json:"requested"`
	// Unconfirmed is true when the stop request was sent but not answered
	// in time while the daemon ran on (ErrUnconfirmed): taken as delivered,
	// with no fallback at once, for a daemon already stopping reads none.
	Unconfirmed bool `json:"unconfirmed,omitempty"`
	// RequestError is why the stop request failed; for an unconfirmed
	// one, set only when the step ended with devices left (the daemon did
	// not stop: a hung daemon reads no request either).
	RequestError string `json:"request_error,omitempty"`
	// Exited is true when the daemon was seen to have exited by the step's
	// end, stopped on request or killed.
	Exited bool `json:"exited"`
	// Killed is true when the step killed the daemon (Daemon.Kill returned
	// nil); KillError is Kill's error when it failed.
	Killed    bool   `json:"killed"`
	KillError string `json:"kill_error,omitempty"`
	// LeftRunning is true when the step ended with the daemon alive.
	LeftRunning bool `json:"left_running"`
	// CannotTell, with LeftRunning, is why the step's last look could not
	// tell whether the daemon still serves a disk the step does not have
	// (sysfs, or the daemon's fds, not read), which kept it from killing the daemon on a kernel
	// not known fixed; empty otherwise. Such a daemon may serve a live
	// disk: a process whose exit kills it (a parent it dies with) must not
	// exit while it runs, as for a device left live.
	CannotTell string `json:"cannot_tell,omitempty"`
}

// Report is the outcome of one Run.
type Report struct {
	// Kernel is the running kernel's release, KernelClass what the kernel
	// table made of it: whether killing the daemon with a live device is
	// safe there (KernelClass.MayKillWithLiveDevices).
	Kernel      string      `json:"kernel"`
	KernelClass KernelClass `json:"kernel_class"`
	// KernelDecision says which rule of the kernel table decided
	// KernelClass, from which release string, and which operator
	// declaration matched if one did.
	KernelDecision KernelDecision `json:"kernel_decision"`
	Start          time.Time      `json:"start"`
	Duration       time.Duration  `json:"duration_ns"`
	// Deadline is ctx's deadline, zero if it had none, or the earlier one
	// Teardown.Tighten moved it to (a "deadline moved" step in Steps says
	// when, and from what).
	Deadline time.Time      `json:"deadline,omitzero"`
	Devices  []DeviceReport `json:"devices"`
	Daemon   DaemonReport   `json:"daemon"`
	Steps    []StepResult   `json:"steps"`
	// LastResort is what the last-resort sequence did (the holders it
	// killed and spared, and why), nil when it did not run.
	LastResort *LastResortReport `json:"last_resort,omitempty"`
	// Verdict is the worst device verdict, VerdictStopped when every
	// device went, VerdictAbsent when the worst is a listed device never
	// seen, VerdictNothingToDo when there was nothing.
	Verdict Verdict `json:"verdict"`
	// Note explains VerdictNothingToDo or a degraded run (for example the
	// control fallback being unavailable).
	Note string `json:"note,omitempty"`
}

// Device returns the report for device id, or nil.
func (r *Report) Device(id int) *DeviceReport {
	for i := range r.Devices {
		if r.Devices[i].ID == id {
			return &r.Devices[i]
		}
	}
	return nil
}

// Step returns the first step named name, or nil.
func (r *Report) Step(name string) *StepResult {
	for i := range r.Steps {
		if r.Steps[i].Name == name {
			return &r.Steps[i]
		}
	}
	return nil
}

// String summarises the report: the step's verdict, then its Note when it
// has one ("  note: ..."), then one line per device and the last resort.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "ublk teardown: %s (kernel %s, %s by rule %q) in %v\n", r.Verdict, r.Kernel, r.KernelClass,
		r.KernelDecision.Rule, r.Duration.Round(time.Millisecond))
	if r.Note != "" { // why the step ended so, which the verdict alone does not say
		fmt.Fprintf(&b, "  note: %s\n", strings.ReplaceAll(r.Note, "\n", "; "))
	}
	for _, d := range r.Devices {
		final := d.Final.State()
		if len(d.Pending) > 0 {
			final += ", " + strings.Join(d.Pending, ", ") + " pending"
		}
		fmt.Fprintf(&b, "  ublkb%d: %s -> %s; in flight %d -> %d; %d holders: %s%s\n", d.ID,
			d.Initial.State(), final, d.InflightBefore.Total(), d.InflightAfter.Total(), len(d.Holders), d.Verdict, underHolders(d))
	}
	if lr := r.LastResort; lr != nil {
		dying := ""
		if n := len(lr.Dying()); n > 0 {
			dying = fmt.Sprintf(", %d SIGKILLed (exit not seen)", n)
		}
		fmt.Fprintf(&b, "  last resort at +%v: %d killed%s, %d spared\n", lr.At.Sub(r.Start).Round(time.Millisecond), len(lr.Killed()), dying, len(lr.Spared()))
		for _, h := range lr.Holders {
			verb := "spared"
			switch {
			case h.Killed:
				verb = "killed"
			case h.Signalled:
				verb = "SIGKILLed, exit not seen"
			}
			started := ""
			if h.StartTime != 0 {
				started = fmt.Sprintf(", started at clock tick %d", h.StartTime)
			}
			fmt.Fprintf(&b, "    %s %s (ublkb%d%s): %s\n", verb, h.Holder, h.Device, started, h.Reason)
		}
	}
	return b.String()
}

// severity orders verdicts for Report.Verdict: the worst one wins.
func severity(v Verdict) int {
	switch v {
	case VerdictNothingToDo:
		return 0
	case VerdictStopped:
		return 1
	case VerdictAbsent:
		return 2
	case VerdictStoppedByControl:
		return 3
	case VerdictKilled:
		return 4
	case VerdictNotStopped:
		return 5
	case VerdictOrphaned:
		return 6
	case VerdictHeld:
		return 7
	case VerdictLeftLive:
		return 8
	}
	return 9
}

// underHolders says what became of the STOP_DEV the last resort sent
// device d under its holders ("" when it sent none): stopped, sent and
// not seen complete (pending: the device stops only once the daemon
// answers its I/O in flight, which a hung one never does), or failed.
// Before, each was "stopped under its holders", beside a left_live
// verdict (row 1301).
func underHolders(d DeviceReport) string {
	i := slices.IndexFunc(d.Steps, func(s StepResult) bool { return s.Name == stepStopUnderHolders })
	switch {
	case i < 0:
		return ""
	case slices.Contains(d.Pending, "STOP_DEV"):
		return ", STOP_DEV sent under its holders by the last resort, not seen complete"
	case i+1 < len(d.Steps) && d.Steps[i+1].Name == "STOP_DEV" && d.Steps[i+1].Err != "":
		return ", STOP_DEV under its holders by the last resort failed"
	}
	return ", stopped under its holders by the last resort"
}
