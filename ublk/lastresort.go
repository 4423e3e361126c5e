package ublk

import "time"

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
	// Reason says why it was killed or spared.
	Reason string `json:"reason"`
	Err    string `json:"error,omitempty"`
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

// Killed returns the holders the sequence killed.
func (r *LastResortReport) Killed() []HolderFate {
	var out []HolderFate
	for _, h := range r.Holders {
		if h.Killed {
			out = append(out, h)
		}
	}
	return out
}

// Spared returns the holders the sequence left alive.
func (r *LastResortReport) Spared() []HolderFate {
	var out []HolderFate
	for _, h := range r.Holders {
		if !h.Killed {
			out = append(out, h)
		}
	}
	return out
}
