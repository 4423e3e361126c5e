package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/drainkit/drainkit/internal/durable"
	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/internal/procstat"
	"github.com/drainkit/drainkit/internal/runsc"
	"github.com/drainkit/drainkit/pause"
)

// A Runtime runs sandboxes. The Node serialises calls for one sandbox; calls for
// different sandboxes run concurrently.
type Runtime interface {
	// Name is the runtime's name in records: "fake" or "runsc".
	Name() string
	// Create starts a new running sandbox.
	Create(ctx context.Context, id string) error
	// Pause stops a running sandbox and saves its state; it returns where the state is.
	// When it fails the sandbox is still running, unless the error is ErrDied (it had
	// died: nothing saved), ErrLost (stopped by a pause that failed: its state lost),
	// ErrNotDurable (stopped, its state in Image(id) but not durable) or ErrUnverified
	// (stopped, its state saved where it returns, durable, but not known to hold a
	// workload that runs). An error that no retry can help is permanent
	// (backoff.Permanent).
	Pause(ctx context.Context, id string) (image string, err error)
	// Resume starts a sandbox again from the state Pause saved in image. An image that
	// restores nothing that runs is ErrDied.
	Resume(ctx context.Context, id, image string) error
	// Destroy stops the sandbox if it runs and removes everything it left.
	Destroy(ctx context.Context, id string) error
	// Image returns where Pause puts sandbox id's state: a path inside the runtime's own
	// directory, derived from the ID alone. A Node resumes from it, never from a path a
	// record names.
	Image(id string) string
}

// Fake is an in-process Runtime: a sandbox is a start time, and pausing one takes
// PauseLatency (spread by Jitter) and writes a small image file. The zero value needs Dir.
type Fake struct {
	// Dir holds the image files; required.
	Dir string
	// PauseLatency is how long a pause takes; Jitter spreads it uniformly over
	// PauseLatency x [1-Jitter, 1+Jitter], the same for the same ID every time.
	PauseLatency time.Duration
	Jitter       float64
	// Disk, if set, is the capacity the pauses share: a pause writes its Size to it, at
	// most FakeBytesPerSecond (its Latency when alone), where without one a pause is a
	// timer of its Latency and any number of them in parallel cost nothing more than one
	// (SharePauses).
	Disk *fakesandbox.Disk

	mu      sync.Mutex
	started map[string]time.Time
}

// fakeImage is what Fake writes for a paused sandbox.
type fakeImage struct {
	ID     string        `json:"id"`
	Uptime time.Duration `json:"uptime_ns"`
}

// Name returns "fake".
func (f *Fake) Name() string { return "fake" }

// Latency returns how long pausing sandbox id takes.
func (f *Fake) Latency(id string) time.Duration {
	h := fnv.New64a()
	h.Write([]byte(id))
	u := float64(h.Sum64()%10000) / 9999 // in [0, 1], fixed per ID
	return time.Duration(float64(f.PauseLatency) * (1 + f.Jitter*(2*u-1)))
}

// Create starts sandbox id.
func (f *Fake) Create(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.started == nil {
		f.started = map[string]time.Time{}
	}
	f.started[id] = time.Now()
	return ctx.Err()
}

// FakeBytesPerSecond is the nominal rate at which a fake sandbox's size (Size) stands for
// its pause: 1 GiB a second of PauseLatency.
const FakeBytesPerSecond = 1 << 30

// Size returns sandbox id's size in bytes: what its pause stands for, Latency(id) at
// FakeBytesPerSecond, the same for the same ID every time; 0 (unknown) with no latency. A
// fake sandbox has no memory, but a pause of it costs more than its latency (its image
// and its record are written and synced besides, more so with many at once), so a size
// the Preserver turns into a time at the rate it learned says how long the pause takes,
// where the latency alone always said too little.
func (f *Fake) Size(id string) int64 {
	return int64(f.Latency(id).Seconds() * FakeBytesPerSecond)
}

// SharePauses makes the pauses share a capacity of k pauses at full speed (Disk): up to k
// at once each take their Latency, and n > k at once each run at k/n of their speed (k/n
// of FakeBytesPerSecond), as real pauses in flight share the node's disk (a Firecracker
// snapshot writes the VM's memory) or CPU (a gVisor checkpoint). The node's throughput
// grows with the pauses in flight up to k and is flat beyond: a concurrency limit has a
// knee to find. k 0 shares nothing, each pause its own timer. Call it before the pauses.
func (f *Fake) SharePauses(k int) {
	f.Disk = nil
	if k > 0 {
		f.Disk = &fakesandbox.Disk{Bandwidth: float64(k) * FakeBytesPerSecond, PerWriter: FakeBytesPerSecond}
	}
}

// Image returns Dir/ID.img.
func (f *Fake) Image(id string) string { return filepath.Join(f.Dir, id+".img") }

// Pause takes Latency(id) (with a Disk, as long as writing Size(id) to it takes while
// the other pauses in flight write theirs), or returns ctx's error if ctx ends first, and writes the
// sandbox's image file durably within that time: the latency is the whole pause, the
// image included, so that an estimate of Latency is right (a disk slower than the
// latency makes the pause as long as its write). The sandbox stops running only once
// its image is written: on any error it keeps running, so a retry pauses it again and
// fails, if it does, with the real error.
func (f *Fake) Pause(ctx context.Context, id string) (string, error) {
	var t *time.Timer
	if f.Disk == nil {
		t = time.NewTimer(f.Latency(id))
		defer t.Stop()
	}
	f.mu.Lock()
	start, ok := f.started[id]
	f.mu.Unlock()
	if !ok {
		return "", fmt.Errorf("fake: sandbox %s is not running", id)
	}
	data, _ := json.Marshal(fakeImage{ID: id, Uptime: time.Since(start)})
	image := f.Image(id)
	if err := durable.MkdirAll(f.Dir, 0o700); err != nil {
		return "", err
	}
	if err := durable.WriteFile(image, data, 0o600); err != nil {
		return "", err
	}
	if err := f.wait(ctx, id, t); err != nil {
		_ = os.Remove(image) // not paused: it keeps running
		return "", err
	}
	f.mu.Lock()
	delete(f.started, id)
	f.mu.Unlock()
	return image, nil
}

// wait is the rest of sandbox id's pause: the timer t of its latency, or its Size written
// to the shared Disk; ctx's error if ctx ends first.
func (f *Fake) wait(ctx context.Context, id string, t *time.Timer) error {
	if t == nil {
		return f.Disk.Write(ctx, f.Size(id))
	}
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Resume checks the image and starts the sandbox again. It leaves the image, for
// DropImage: the Node removes the sandbox's record after the resume, and a process
// killed in between (the kubelet's SIGKILL) comes back with the sandbox paused by that
// record, which must find its image to resume. A Resume that fails (its ctx already
// ended) leaves the sandbox paused.
func (f *Fake) Resume(ctx context.Context, id, image string) error {
	data, err := os.ReadFile(image)
	if err != nil {
		return fmt.Errorf("fake: resume %s: %w", id, err)
	}
	var img fakeImage
	if err := json.Unmarshal(data, &img); err != nil || img.ID != id {
		return fmt.Errorf("fake: resume %s: image %s is not this sandbox's", id, image)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("fake: resume %s: %w", id, err)
	}
	return f.Create(context.WithoutCancel(ctx), id)
}

// DropImage removes the image a Resume left, once nothing names it any more: the Node
// calls it after it removed the resumed sandbox's record. A missing image is no error.
func (f *Fake) DropImage(id string) error {
	if err := os.Remove(f.Image(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Destroy forgets the sandbox and removes its image. An ended ctx keeps it from starting;
// once started, it fails only when it failed: a Destroy that did its work and then
// reported ctx's error would have the Node keep listing a sandbox the fake no longer runs.
func (f *Fake) Destroy(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("fake: destroy %s: %w", id, err)
	}
	f.mu.Lock()
	delete(f.started, id)
	f.mu.Unlock()
	if err := os.Remove(f.Image(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Runsc is a Runtime of real gVisor sandboxes running the runsc counter workload:
// Create is runsc run -detach, Pause is runsc checkpoint, Resume is runsc delete (of the
// stopped container) then restore -detach, Destroy is runsc delete -force. Each sandbox has a bundle, an image
// directory and a log under Dir.
type Runsc struct {
	// Runtime runs the runsc commands; its Root must be set.
	Runtime *runsc.Runtime
	// Dir holds bundles/ID, images/ID and logs/ID.log; required.
	Dir string

	mu     sync.Mutex
	failed map[string]error // the sandboxes whose last checkpoint failed, and why
	// full is the most free space the images volume had when a checkpoint began that
	// failed on it for want of space (bytes or inodes), with that failure; nil before one
	// did.
	full *noSpace
	// spare says that a checkpoint that full says would fail is not started
	// (SpareOnFullVolume).
	spare atomic.Bool
}

// SpareOnFullVolume makes every later Pause refuse to start a checkpoint while the
// images volume has no more free space than one that failed for want of space began
// with (Pause): for a drain that signals the sandboxes it could not checkpoint
// (gvisor-worker's escalate step), where a save that fails stops its sandbox with its
// state lost and one not started leaves it running for the SIGTERM that lets its actor
// save itself. Without it (sandboxd, and every Pause outside a drain) each checkpoint is
// tried: the rule refuses a small sandbox that would fit after a large one did not, and
// a server with no signal step loses a refused sandbox at exit all the same.
func (r *Runsc) SpareOnFullVolume() { r.spare.Store(true) }

// noSpace is a checkpoint that failed for want of space on the images volume: what was
// free when it began, and its error.
type noSpace struct {
	free volumeFree
	err  error
}

// volumeFree is what a volume has free: bytes to an unprivileged writer, and inodes,
// of a filesystem that has a fixed number of them (statfs's files; btrfs says 0).
type volumeFree struct {
	bytes, inodes uint64
	inodesKnown   bool
}

// outOfInodes reports whether the volume had no inode free: making the image directory
// or file fails with ENOSPC (no space left on device) whatever the bytes free.
func (v volumeFree) outOfInodes() bool { return v.inodesKnown && v.inodes == 0 }

// noMoreThan reports whether v has no more of what full ran out of than full had: its
// inodes when full had none free, else its bytes. A volume out of inodes whose bytes
// grew still fails every checkpoint.
func (v volumeFree) noMoreThan(full volumeFree) bool {
	if full.outOfInodes() {
		return v.inodes <= full.inodes
	}
	return v.bytes <= full.bytes
}

// want is what a volume like v ran out of, for an error: inodes or space.
func (v volumeFree) want() string {
	if v.outOfInodes() {
		return "inodes"
	}
	return "space"
}

func (v volumeFree) String() string {
	if v.outOfInodes() {
		return fmt.Sprintf("no inode free (and %d bytes)", v.bytes)
	}
	return fmt.Sprintf("%d bytes free", v.bytes)
}

// NewRunsc returns the Runsc with everything under dir: bundles, images and logs, and
// runsc's own state in dir/root/pidns-N-B-S, for this process's PID namespace: N its
// inode, B the boot, S when the namespace's init started.
//
// runsc's state records the PIDs of each sandbox and its gofer, and runsc delete -force
// SIGKILLs them. Those numbers mean something only in the namespace that recorded them: a
// worker restarted in a new pod that force-deleted what its predecessor left would SIGKILL
// whichever of its own processes now has those numbers, itself or the runsc it just
// started (seen in CI: "runsc delete -force: signal: killed"). Keyed by namespace, a
// successor only ever signals PIDs its own namespace recorded; checkpoint images, bundles
// and logs are shared, so it restores what its predecessor saved. The inode alone is not
// the namespace: the kernel gives a gone namespace's inode to the next one (often the
// very next pod's), and a hostPath outlives a reboot, which starts the inodes over.
func NewRunsc(dir string) *Runsc {
	return &Runsc{Runtime: &runsc.Runtime{Root: filepath.Join(dir, "root", pidNamespace())}, Dir: dir}
}

// pidNamespace names this process's PID namespace "pidns-N-B-S" (see NewRunsc), with
// what /proc says of it: "pidns" when it does not say which namespace, and without B or S
// when it does not say those.
func pidNamespace() string {
	self, err := os.Readlink("/proc/self/ns/pid") // "pid:[4026531836]"
	if err != nil {
		return "pidns"
	}
	var ino uint64
	if _, err := fmt.Sscanf(self, "pid:[%d]", &ino); err != nil {
		return "pidns"
	}
	name := fmt.Sprintf("pidns-%d", ino)
	if boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil && len(boot) >= 8 {
		name += "-" + string(boot[:8])
	}
	if start, ok := initStart(self); ok {
		name += fmt.Sprintf("-%d", start)
	}
	return name
}

// initStart returns when the init of the PID namespace ns ("pid:[N]") started, in clock
// ticks since boot: the earliest start among the processes /proc shows in ns (its PID 1
// when /proc is the namespace's own, as in a container). A namespace's init outlives it,
// so two namespaces never have the same one.
func initStart(ns string) (uint64, bool) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, false
	}
	var first uint64
	found := false
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		if link, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", "pid")); err != nil || link != ns {
			continue
		}
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := procstat.Read(pid); err == nil && (!found || st.StartTime < first) {
			first, found = st.StartTime, true
		}
	}
	return first, found
}

// forgetOtherNamespaces removes the runsc state that other PID namespaces left under
// dir/root, with the empty cgroups runsc made for their containers (runsc.Forget): a
// drain leaves its checkpointed sandboxes undeleted, and their cgroups stayed for good,
// the restore of each joining its own and leaving it. It signals nothing: the processes
// it names are not this namespace's to signal, and they died with their namespace (a
// pod's container ends with its PID 1). That holds only under the state directory's lock
// (NewRuntime): the server that held it before has exited.
func (r *Runsc) forgetOtherNamespaces() error {
	parent := filepath.Dir(r.Runtime.Root)
	entries, err := os.ReadDir(parent)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sandbox: runsc state: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if path := filepath.Join(parent, e.Name()); path != r.Runtime.Root {
			errs = append(errs, runsc.Forget(path))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sandbox: runsc state of other PID namespaces: %w", err)
	}
	return nil
}

// NewRuntime returns the Runtime named name for a server whose state directory is
// stateDir: "fake", with pauseLatency and jitter, keeps its images in stateDir/images;
// "runsc" is NewRunsc(stateDir/runsc), without the runsc state other PID namespaces
// left, and fails when real sandboxes cannot run here (runsc.Usable).
//
// The caller must hold the state directory's lock (internal/statedir): the
// runsc state of other PID namespaces is dead only when no other server runs on the
// directory, and a server still draining into it would lose its checkpoints with it.
func NewRuntime(name, stateDir string, pauseLatency time.Duration, jitter float64) (Runtime, error) {
	switch name {
	case "fake":
		return &Fake{Dir: filepath.Join(stateDir, "images"), PauseLatency: pauseLatency, Jitter: jitter}, nil
	case "runsc":
		if err := runsc.Usable(); err != nil {
			return nil, err
		}
		r := NewRunsc(filepath.Join(stateDir, "runsc"))
		if err := r.forgetOtherNamespaces(); err != nil {
			return nil, err
		}
		return r, nil
	}
	return nil, fmt.Errorf("sandbox: no runtime %q (want fake or runsc)", name)
}

// Name returns "runsc".
func (r *Runsc) Name() string { return "runsc" }

// Bundle returns sandbox id's bundle.
func (r *Runsc) Bundle(id string) runsc.Bundle {
	return runsc.Bundle{Dir: filepath.Join(r.Dir, "bundles", id)}
}

func (r *Runsc) log(id string) string { return filepath.Join(r.Dir, "logs", id+".log") }

// Image returns Dir/images/ID, the checkpoint directory.
func (r *Runsc) Image(id string) string { return filepath.Join(r.Dir, "images", id) }

// Create writes the sandbox's bundle and starts it.
func (r *Runsc) Create(ctx context.Context, id string) error {
	if err := os.MkdirAll(filepath.Join(r.Dir, "logs"), 0o700); err != nil {
		return err
	}
	b, err := runsc.WriteBundle(r.Bundle(id).Dir, runsc.CounterArgs())
	if err != nil {
		return err
	}
	// A resume after a restart, the host's too, restores from the image into this bundle.
	if err := r.syncNew(b.Dir); err != nil {
		return fmt.Errorf("bundle of %s not durable: %w", id, err)
	}
	return r.Runtime.Run(ctx, id, b, r.log(id))
}

// Pause checkpoints the sandbox into its image directory, which stops it, and fsyncs the
// image and the entries naming it, so that the record written after it never points at
// a lost image. The stopped container is deleted later, by Resume or Destroy: runsc
// delete of a checkpointed container takes about two seconds (it waits for the sandbox
// process to go), which a node drain should not spend before SIGKILL.
//
// ctx keeps a checkpoint from starting, never cuts one short: once runsc checkpoint has
// reached the sandbox, gVisor writes the image and stops the sandbox whatever happens to
// the runsc client, so killing the client at ctx's end only lost the answer: Pause failed
// (the sandbox "still running") while it had stopped with its image written, and the
// next Pause deleted that image. A started checkpoint takes as long as gVisor takes.
//
// A sandbox already stopped when its checkpoint would begin (dead: its sandbox process
// killed, its workload exited) is ErrDied, with pause.ErrGone: no checkpoint was made. So
// is one whose checkpoint caught its workload exiting (runsc.SavedRunning: the image holds
// exiting tasks alone, which a restore ends at once); its image is removed. An image
// SavedRunning cannot read (a format of a newer runsc) is kept and made durable as a
// save, and Pause returns it with ErrUnverified, permanent: whether it saved a workload
// that runs is not known, which taken as made was said of no one (row 1781).
//
// A checkpoint that fails (its image cannot be written: the images volume is full or
// failing) stops the sandbox all the same, for gVisor ends the sandbox after every save.
// Its state is then lost: the error is ErrLost, permanent, and the partial image is
// removed. A checkpoint that failed with the sandbox still running (runsc could not reach
// it) fails Pause as any other error, and a later Pause that finds the sandbox stopped
// calls it lost too, not died: the failed checkpoint may be what stopped it. One whose
// call never reached the sandbox (runsc.ErrNotReached: no save began), or that never ran
// runsc (its last image could not be removed, or its image directory made: a read-only
// images volume), is not such a failure: Pause fails at once, and a Pause that finds the
// sandbox stopped then calls it died, where one that never ran runsc listed it running.
//
// After SpareOnFullVolume, once a checkpoint failed for want of space on the images
// volume, no checkpoint starts while the volume has no more free space than that one
// began with (no more inodes, for a volume that had none free: its bytes free do not
// make a mkdir pass, and the error says inodes): it would likely fail the same way and
// stop its sandbox, which then never got the drain's SIGTERM (on a full volume every
// sandbox of a drain was lost so, one after another). Pause then fails for good
// (backoff.Permanent) with the sandbox running, saying why.
//
// An image that cannot be made durable (its fsync fails) fails Pause with the sandbox
// restored from it, running. When that restore fails too, the sandbox is stopped with no
// durable image: the error is ErrNotDurable, permanent (backoff.Permanent), for a retry
// would remove the image.
func (r *Runsc) Pause(ctx context.Context, id string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("runsc checkpoint %s not started: %w", id, err)
	}
	image := r.Image(id)
	if err := os.RemoveAll(image); err != nil {
		// A read-only images volume refuses even the removal of what is not there: no
		// checkpoint begins, and whether the sandbox still runs is asked, as for one
		// whose image directory cannot be made (runsc.Runtime.NotBegun). Returned as it
		// was, a sandbox that had died was listed running by every retry.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return "", r.notStarted(ctx, id, r.Runtime.NotBegun(sctx, id, fmt.Errorf("not started: removing its last image: %w", err)))
	}
	free, known := freeSpace(filepath.Dir(image))
	if full := r.noSpace(); full != nil && known && free.noMoreThan(full.free) && r.spare.Load() {
		// gVisor ends the sandbox after a save that fails (ErrLost): one that would fail
		// for want of space is not started, and the sandbox runs on, for the drain's
		// SIGTERM (an actor saves itself on it). What ran out is said: a volume out of
		// inodes has bytes free, which "for want of space" alone contradicted.
		return "", backoff.Permanent(fmt.Errorf("runsc checkpoint %s not started: the images volume has %s, no more than when a checkpoint that failed for want of %s began (%s: %w); a save that fails stops the sandbox, its state lost: it runs on",
			id, free, full.free.want(), full.free, full.err))
	}
	// Its image, not its stop: a checkpoint's record waited for the container to be
	// seen stopped, up to runsc.StopWait whatever the deadline (row 1783).
	if err := r.Runtime.CheckpointImage(context.WithoutCancel(ctx), id, image); err != nil {
		if known && strings.Contains(err.Error(), "no space left on device") {
			r.setNoSpace(free, err)
		}
		if errors.Is(err, runsc.ErrStopped) || errors.Is(err, runsc.ErrNotReached) {
			return "", r.notStarted(ctx, id, err)
		}
		return "", r.checkpointFailed(ctx, id, err)
	}
	r.forgetFailure(id)
	running, unread := runsc.SavedRunning(image)
	if unread == nil && !running {
		return "", r.exitedAtCheckpoint(ctx, id, image)
	}
	// The record that points at the image is made durable next; the image must be too.
	if err := r.syncNew(image); err != nil {
		// The checkpoint stopped the sandbox, and an image that may not survive the node
		// preserves nothing. A failed Pause leaves the sandbox running (Runtime), or the
		// node would say running of a stopped sandbox and its retry would remove the
		// image and fail on a stopped container: restored from the image, still readable
		// here, it runs on, and a retry checkpoints it into a new image.
		if rerr := r.Resume(context.WithoutCancel(ctx), id, image); rerr != nil {
			// Stopped, with an image that is not durable and no record: no retry can
			// checkpoint it, and one would remove the image.
			return "", backoff.Permanent(fmt.Errorf("runsc checkpoint %s: %w: %w; restoring it from the image failed: %w",
				id, ErrNotDurable, err, rerr))
		}
		// Nothing names the image now: kept, it held its size of the images volume to
		// the sandbox's next checkpoint or delete, and another sandbox's checkpoint
		// failed for want of space, that sandbox lost (row 3262).
		if rmerr := removePresent(image); rmerr != nil {
			return "", fmt.Errorf("runsc checkpoint %s: the image could not be made durable (the sandbox was restored from it and runs on; the image stays, not removed: %w): %w", id, rmerr, err)
		}
		return "", fmt.Errorf("runsc checkpoint %s: the image could not be made durable (the sandbox was restored from it and runs on): %w", id, err)
	}
	if unread != nil {
		return image, backoff.Permanent(fmt.Errorf("runsc checkpoint %s: %w: %w", id, ErrUnverified, unread))
	}
	return image, nil
}

// notStarted is Pause's error for sandbox id, whose checkpoint runsc found stopped before
// it began, or that no save began of (err: runsc.ErrStopped, runsc.ErrNotReached). Stopped,
// it died (ErrDied), unless an earlier checkpoint of it failed, which may be what stopped
// it: then it is lost. Not reached, it runs or is ending: no save began, so none can have
// stopped it, and the failure is not remembered as a failed checkpoint, which would call
// its stop at a retry a loss; a retry tells (row 1782).
//
// One that could not begin on a read-only images volume (EROFS), or in an images
// directory that refuses the worker (EPERM: immutable, chattr +i; EACCES: its owner, its
// mode, an LSM's denial), fails for good (backoff.Permanent), the sandbox running: the
// volume stays read-only through a drain (ext4 remounts itself so after a disk error, for
// a person to repair), as a directory's attribute and permissions do, and the
// Preserver's retries until its deadline kept the sandbox from the drain's SIGTERM, its
// actor left the escalate step's reserve to save itself where most of the grace was there
// for it.
func (r *Runsc) notStarted(ctx context.Context, id string, err error) error {
	if errors.Is(err, runsc.ErrNotReached) {
		err = fmt.Errorf("runsc checkpoint %s: %w; log %s", id, err, r.log(id))
		switch {
		case errors.Is(err, syscall.EROFS):
			return backoff.Permanent(fmt.Errorf("%w: the images volume is read-only, and no checkpoint can begin on it: it runs on", err))
		case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
			return backoff.Permanent(fmt.Errorf("%w: the images directory refuses this worker (immutable, or not writable by it), and no checkpoint can begin in it: it runs on", err))
		}
		return err
	}
	if earlier := r.failedCheckpoint(id); earlier != nil {
		return r.lost(id, fmt.Errorf("found stopped after a checkpoint of it had failed (%w): %w", earlier, err))
	}
	return r.died(ctx, id, err)
}

// ErrUnverified is wrapped by the (permanent) error of Runsc.Pause whose checkpoint was
// made, its image durable in Image(id), but in a format runsc.SavedRunning cannot read: it
// may hold a workload that runs, or one its checkpoint caught exiting, which a restore
// ends at once. The sandbox is stopped, paused in that image, which a resume restores
// and so tells; but no one can say it was preserved.
var ErrUnverified = errors.New("checkpointed into an image whose saved tasks cannot be read: whether it saved a workload that runs is not known")

// noSpace returns the checkpoint that failed for want of space on the images volume, if
// one did.
func (r *Runsc) noSpace() *noSpace {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.full
}

// setNoSpace remembers a checkpoint that failed for want of space (err), begun with free
// free: the most free bytes one failed with is kept.
func (r *Runsc) setNoSpace(free volumeFree, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.full == nil || free.bytes >= r.full.free.bytes {
		r.full = &noSpace{free: free, err: err}
	}
}

// freeSpace returns what is free on the volume of dir, created if missing, and whether
// it could tell.
func freeSpace(dir string) (volumeFree, bool) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return volumeFree{}, false
	}
	return volumeFreeOf(dir)
}

// ErrLost is wrapped by the permanent error (backoff.Permanent) of Runsc.Pause whose
// checkpoint failed and stopped the sandbox all the same: gVisor ends the sandbox once a
// save is over, written or not (runsc 20221219, pkg/sentry/control/state.go: "Save
// failed: exiting..."), so a checkpoint that fails on a full or failing images volume
// loses the sandbox's state. No retry can checkpoint it, and it did not die on its own:
// it is lost, never pause.ErrGone, which a drain counts as no fault.
var ErrLost = errors.New("sandbox stopped by a checkpoint that failed: its state is lost")

// checkpointFailed is Pause's error for sandbox id, whose checkpoint failed (err) without
// runsc finding it stopped first. runsc is asked what the failed checkpoint left: a
// stopped sandbox (runsc.Runtime.Exited: stopped, gone, or its sandbox process a zombie)
// is lost (ErrLost), its partial image removed; a running one returns err, for a retry.
// The failure is remembered until a checkpoint of id succeeds or Destroy removes it: gVisor's sandbox process may still be going when runsc answers, or runsc
// may not say, and a retry that then finds the sandbox stopped must call it lost too,
// never died (ErrDied).
func (r *Runsc) checkpointFailed(ctx context.Context, id string, err error) error {
	r.mu.Lock()
	if r.failed == nil {
		r.failed = make(map[string]error)
	}
	r.failed[id] = err
	r.mu.Unlock()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	// Exited, not the state alone: a sandbox whose processes ended with the save but
	// are not yet reaped is "running" to runsc (kill(pid, 0) passes on a zombie).
	stopped, serr := r.Runtime.Exited(sctx, id)
	switch {
	case serr == nil && stopped:
		return r.lost(id, err)
	case serr != nil:
		return fmt.Errorf("%w (and runsc state cannot say whether it stopped the sandbox: %w)", err, serr)
	}
	return err
}

// lost is Pause's error for sandbox id, stopped by a checkpoint that failed (err):
// ErrLost, permanent, after removing the partial image, which no record points at and
// nothing can restore.
func (r *Runsc) lost(id string, err error) error {
	err = fmt.Errorf("runsc checkpoint %s: %w: %w; log %s", id, ErrLost, err, r.log(id))
	if rerr := os.RemoveAll(r.Image(id)); rerr != nil {
		err = fmt.Errorf("%w; and removing its partial image failed: %w", err, rerr)
	}
	return backoff.Permanent(err)
}

// failedCheckpoint returns the error of sandbox id's last checkpoint, if it failed.
func (r *Runsc) failedCheckpoint(id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed[id]
}

// forgetFailure forgets that a checkpoint of sandbox id failed.
func (r *Runsc) forgetFailure(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.failed, id)
}

// ErrDied is wrapped, with pause.ErrGone, by the error of Runsc.Pause of a sandbox that
// had stopped before its checkpoint began: its workload exited, or its sandbox process
// was killed (the kernel's OOM killer, a person) or crashed. No checkpoint can save it,
// and none lost it: the Preserver reports it Vanished, the error its account.
var ErrDied = errors.New("sandbox died before its checkpoint")

// died is Pause's error for sandbox id, which runsc found stopped (err): ErrDied and
// pause.ErrGone, with why as far as runsc knows: its workload's exit status when runsc
// has it, which it never has once the sandbox process has exited (gVisor's sandbox
// process exits with its workload, and the status goes to whoever reaps that process,
// PID 1 or a subreaper, not to runsc: `runsc wait` says "sandbox no longer running and
// its exit status is unavailable" after a workload's exit 3 as after a SIGKILL). So the
// error names every cause, a normal exit first, where it called every dead sandbox
// killed or crashed (row 1073). Its log may say more.
func (r *Runsc) died(ctx context.Context, id string, err error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	why := "its sandbox process has exited and runsc does not have its exit status (its reaper does): " +
		"its workload exited, or the process was killed (the kernel's OOM killer, a person) or crashed"
	if status, werr := r.Runtime.Wait(ctx, id); werr == nil {
		why = fmt.Sprintf("its workload exited, status %d", status)
	}
	return fmt.Errorf("%w: %w: %s; log %s (%w)", ErrDied, pause.ErrGone, why, r.log(id), err)
}

// exitedAtCheckpoint is Pause's error for sandbox id, whose checkpoint succeeded with an
// image that holds its workload's exiting tasks alone (runsc.SavedRunning): the workload
// exited as the checkpoint reached it, and a restore of the image stops at once. It died,
// as one found stopped before its checkpoint did (died): counted preserved, its resume
// "succeeded" with nothing running (row 1392). The image, which preserves nothing, is
// removed.
func (r *Runsc) exitedAtCheckpoint(ctx context.Context, id, image string) error {
	err := fmt.Errorf("runsc checkpoint %s caught its workload exiting: its image held exiting tasks alone, which a restore ends at once", id)
	if rerr := os.RemoveAll(image); rerr != nil {
		err = fmt.Errorf("%w; and removing that image failed: %w", err, rerr)
	}
	return r.died(ctx, id, err)
}

// ErrNotDurable is wrapped by the (permanent) error of Runsc.Pause whose checkpoint image
// could not be made durable and whose sandbox could not be restored from it: the sandbox
// is stopped, its state in Image(id), readable for now but not durable. It is paused, and
// a resume restores it from that image; but no record may point at the image (a crash
// may lose it), so it is lost when the process ends.
var ErrNotDurable = errors.New("the sandbox is stopped in an image that could not be made durable")

// syncNew makes dir, just written under r.Dir, durable: everything in it (syncTree), then
// the entries that name it, in each directory from its parent up to r.Dir's parent (r.Dir
// itself is new on a node's first sandbox). An fsync of a file does not make its name
// durable, nor does one of a directory its own entry in its parent: without them a power
// loss could keep a record that names an image directory, or a bundle, whose entry was
// never written (MkdirAll and runsc create them as they go).
func (r *Runsc) syncNew(dir string) error {
	if err := syncImage(dir); err != nil {
		return err
	}
	top := filepath.Dir(filepath.Clean(r.Dir))
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		if err := syncPath(d); err != nil {
			return err
		}
		if d == top || d == filepath.Dir(d) {
			return nil
		}
	}
}

// syncImage makes a new tree durable: syncTree; a test's hook fails it.
var syncImage = syncTree

// syncTree fsyncs every regular file and directory in the tree at dir, each directory
// after what it holds, dir last.
func syncTree(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case e.IsDir():
			dirs = append(dirs, path)
		case e.Type().IsRegular():
			return syncPath(path)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := syncPath(dirs[i]); err != nil {
			return err
		}
	}
	return nil
}

// syncPath fsyncs the file or directory at path; a test's hook watches it.
var syncPath = fsync

func fsync(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// Resume restores the sandbox from image. An image that holds the exiting tasks alone
// (runsc.SavedRunning: its checkpoint caught the workload exiting, saved before Pause
// said so) is ErrDied, with pause.ErrGone, and is not restored: restored, it stopped at
// once, and the node said running (row 1394).
func (r *Runsc) Resume(ctx context.Context, id, image string) error {
	if running, err := runsc.SavedRunning(image); err == nil && !running {
		return fmt.Errorf("%w: %w: its image holds the exiting tasks alone of a workload its checkpoint caught exiting, which a restore ends at once; log %s",
			ErrDied, pause.ErrGone, r.log(id))
	}
	// A container left by an earlier process of this PID namespace (killed before it
	// deleted it) holds the ID.
	if err := r.Runtime.Delete(ctx, id, true); err != nil && !errors.Is(err, runsc.ErrNotExist) {
		return err
	}
	// Restored, the sandbox leaves its image behind: a mark of the checkpoint that wrote
	// it (markCheckpointLeft, kept when its record could not be written) would have the
	// next server take that stale image for a save of the sandbox, lost running since. A
	// mark that cannot be removed has the image judged, as before the mark.
	_ = r.adopted(id)
	return r.Runtime.Restore(ctx, id, r.Bundle(id), image, r.log(id))
}

// DropImage removes the image sandbox id was restored from, once nothing names it: the
// Node calls it after it removed the resumed sandbox's record (Resume leaves the image,
// for a process killed before the record went comes back with the sandbox paused by that
// record). The restored sandbox does not read it again (runsc restore has loaded it), and
// kept, it held its size of the images volume until the sandbox's next checkpoint or
// delete: the checkpoint of another sandbox then failed for want of space, which stops
// that sandbox, its state lost (row 3220). A missing image is no error.
func (r *Runsc) DropImage(id string) error {
	return removePresent(r.Image(id))
}

// Destroy force-deletes the container and removes its bundle and image, those it has.
// When the container is deleted but they cannot be removed, its error wraps ErrLeftover.
func (r *Runsc) Destroy(ctx context.Context, id string) error {
	if err := r.Runtime.Delete(ctx, id, true); err != nil && !errors.Is(err, runsc.ErrNotExist) {
		return err
	}
	r.forgetFailure(id)
	if err := errors.Join(removePresent(r.Bundle(id).Dir), removePresent(r.Image(id))); err != nil {
		return fmt.Errorf("%w: %w", ErrLeftover, err)
	}
	return nil
}

// ErrLeftover is wrapped by the error of Runsc.Destroy whose container is deleted but
// whose bundle or image stays on disk, not removable: a read-only volume (ext4 remounted
// read-only after a disk error) keeps the image of a sandbox restored while it was so,
// which DropImage could not remove. The sandbox
// is gone; what it left, which no record names once it is dropped, is the next server's
// sweep's (Node.SweepOrphans).
var ErrLeftover = errors.New("the sandbox is deleted, but what it left on disk could not be removed")

// removePresent removes path and what it holds, when it is there. One that is not there
// is removed already, where os.RemoveAll fails on a read-only volume (EROFS: the kernel
// refuses an unlink there before it looks the name up): the delete of a sandbox never
// checkpointed, whose container runsc had just deleted, failed on its image, and the
// node listed it running, its delete tried again at every timeout (row 3101).
func removePresent(path string) error {
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return os.RemoveAll(path)
}
