package runsc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// ErrStatusLost is wrapped, with syscall.ECHILD, by the errors of commands whose exit
// status another reaper collected first (a PID-1 reaper, tini, a subreaper reaping every
// child): the command ran, but whether it succeeded is unknown. [Runtime.State] still
// answers when the command's output is a complete state, [Runtime.Wait] when it is an
// exit status, and [Runtime.Checkpoint], [Runtime.Run] and [Runtime.Restore] judge
// theirs by what runsc left.
var ErrStatusLost = errors.New("runsc: exit status collected by another reaper")

// ErrNotExist is wrapped by the errors of [Runtime.State], [Runtime.Kill],
// [Runtime.Wait] and [Runtime.Delete] when runsc does not know the container.
var ErrNotExist = errors.New("runsc: container does not exist")

// ErrNotReached is wrapped by the error of [Runtime.Checkpoint] whose call never reached
// the sandbox (its control server refused the connection, or closed it with the call
// unread; or runsc never ran: [Runtime.NotBegun]) while its container was not seen
// stopped: no save began, so none stopped it; it runs, or its process is still ending
// (its workload's exit, a kill), which a checkpoint tried again tells (ErrStopped).
var ErrNotReached = errors.New("runsc: the checkpoint's call never reached the sandbox: no save began")

// ErrStopped is wrapped by the error of a command that needs a running container (runsc
// checkpoint, pause) when runsc found the container stopped before it began: its init
// exited, or its sandbox process is gone (killed, crashed).
var ErrStopped = errors.New("runsc: container is stopped")

// Runtime runs runsc commands against one state directory. Root is required; the other
// fields have working zero values. A Runtime is safe for concurrent use; it holds no state
// of its own beyond its configuration, which must not change while commands run.
type Runtime struct {
	// Binary is the runsc executable; "" means "runsc" looked up in PATH.
	Binary string
	// Root is runsc's --root: the directory holding the state of this Runtime's
	// containers. Required.
	Root string
	// Platform is runsc's --platform ("ptrace", "kvm"); "" leaves runsc's default (ptrace).
	Platform string
	// Network is runsc's --network; "" means "none".
	Network string
	// IgnoreCgroups passes --ignore-cgroups (for hosts where runsc cannot configure cgroups).
	IgnoreCgroups bool
	// ExtraFlags are appended to the global flags of every command.
	ExtraFlags []string
	// WaitDelay bounds how long a command may hold its output after its process ended or
	// its context was cancelled (see [exec.Cmd.WaitDelay]); 0 means one second.
	WaitDelay time.Duration
}

// State is the output of runsc state: the OCI state of one container.
type State struct {
	ID     string `json:"id"`
	Status string `json:"status"` // "created", "running", "paused" or "stopped"
	Pid    int    `json:"pid"`
	Bundle string `json:"bundle"`
}

// stoppedState is runsc's refusal of an action on a stopped container, which it checks
// before it begins: `cannot checkpoint container "ID" in state stopped`.
var stoppedState = regexp.MustCompile(`cannot \w+ container "[^"]*" in state stopped`)

// validID is what runsc accepts as a container ID.
var validID = regexp.MustCompile(`^[\w+.-]+$`)

// GlobalFlags returns the flags placed before every subcommand, in order.
func (r *Runtime) GlobalFlags() []string {
	network := r.Network
	if network == "" {
		network = "none"
	}
	flags := []string{"--root=" + r.Root, "--network=" + network}
	if r.Platform != "" {
		flags = append(flags, "--platform="+r.Platform)
	}
	if r.IgnoreCgroups {
		flags = append(flags, "--ignore-cgroups")
	}
	return append(flags, r.ExtraFlags...)
}

// Run creates and starts container id from bundle b and returns once runsc has detached
// (runsc run -detach). The container's stdout and stderr, and runsc's own messages, are
// appended to the file logPath; on failure the error carries the log's new lines. A run
// whose exit status another reaper collected is judged by what runsc left: the container
// running is a run made (nil); anything else is ErrStatusLost, with the log's new lines.
func (r *Runtime) Run(ctx context.Context, id string, b Bundle, logPath string) error {
	return r.detached(ctx, id, logPath, "run", "-detach", "--bundle="+b.Dir, id)
}

// Restore creates container id from bundle b and the checkpoint in imageDir and starts it
// detached (runsc restore -detach). An ID is free again once its previous container was
// deleted. Output goes to logPath as for [Runtime.Run], and a restore whose exit status
// another reaper collected is judged as a run is: the container running is a restore
// made.
func (r *Runtime) Restore(ctx context.Context, id string, b Bundle, imageDir, logPath string) error {
	return r.detached(ctx, id, logPath, "restore", "-detach", "--bundle="+b.Dir, "--image-path="+imageDir, id)
}

// Checkpoint saves container id into imageDir (created if missing) and stops the container
// (runsc checkpoint --image-path). The stopped container must still be deleted. It
// returns once the container is seen stopped ([Runtime.Exited]), not when runsc answers:
// runsc answers once the image is written, a moment before gVisor's sandbox process has
// exited, so a caller asking runsc state right after was told "running" (row 1670). It
// waits up to StopWait, and not past ctx; a container not seen stopped by then is still
// a save made, its image written: nil all the same, where an error would have its
// caller take the save for failed and retry it over a good image. A
// container already stopped is ErrStopped, with nothing written: one runsc refuses as
// stopped, and one whose control server runsc could not reach while the kernel says the
// sandbox process named is a zombie or gone (it exited as the checkpoint began).
//
// A checkpoint whose exit status another reaper collected is judged by what runsc left,
// for its status alone cannot say: runsc writes "checkpoint failed: ..." to its stderr
// before it exits 128, and nothing when it succeeds, and a checkpoint made stops the
// container, a moment after runsc has answered (gVisor's sandbox process exits once the
// save is over: tens of milliseconds, longer under a CPU limit). So no message, and the
// container stopped (Exited) within StopWait, is a checkpoint made, and returns nil; a
// message is the checkpoint's failure, with the message, wrapping ErrStatusLost; no
// message with the container still running after StopWait, or a state that cannot be
// read, is ErrStatusLost, the image not made. (Before, each was ErrStatusLost: a caller
// that took a stopped container after a failed checkpoint for lost removed a good image.)
//
// A runsc client killed by a signal that was not ctx's (the kernel's OOM killer, a
// person) is judged the same way: once the save has reached the sandbox, gVisor ends it
// and stops the container without its client (measured: killed 0.4 s into a save, the
// container stopped 1.5 s later with an image that restores). Once the save has written
// bytes into imageDir, that stop is waited for however long the save takes, not
// StopWait, and not past ctx, as the client would have waited: a save longer than
// StopWait (a sandbox of a few GB) was "not checkpointed" while it went on. A killed client writes no
// failure either, so a container that stopped on an images volume left with no space is
// taken for a save that failed for want of it (its error says "no space left on
// device"), never for a checkpoint made; nor is one whose image is cut short (its
// header alone, or a chunk cut off: the sandbox killed with its client mid-save, which
// stops the container as a save made does). Another failure of the save (an I/O error)
// cannot be told from a checkpoint made, and shows at the restore.
//
// A checkpoint whose call never reached the sandbox (its control server refused the
// connection while its process was still ending, or the process closed it with the call
// unread: `urpc method "containerManager.Checkpoint" failed: connection reset by peer`;
// it ended, its workload's exit or a kill, so no save began) is ErrStopped when the
// container is seen stopped, looked at once; otherwise it is a failure wrapping
// ErrNotReached, at once, not after a wait (row 1782).
// A checkpoint that fails with EOF (`urpc method "containerManager.Checkpoint" failed:
// EOF`) stays a failure: the sandbox process read the call and ended without answering,
// killed or crashed, and what it leaves is no image. A save that completes is answered
// before its sandbox can exit on its own: gVisor replies once Save has closed the image,
// and a sandbox exiting (after its save, or on its workload's exit) stops its control
// server only once the calls in flight have answered (Loader.Destroy, urpc's
// Server.Stop); only a kill in the moment between the two could lose that answer. A
// sandbox killed during its save leaves the image's header alone, which no restore takes
// (measured, runsc 20221219: 5 of 5 SIGKILLed 0-400 ms into a save left 203-204 bytes,
// restored as "header error: EOF"); one caught exiting is saved and answered (an ~11 KB
// image, no error).
func (r *Runtime) Checkpoint(ctx context.Context, id, imageDir string) error {
	return r.checkpoint(ctx, id, imageDir, true)
}

// CheckpointImage is [Runtime.Checkpoint] that returns nil as soon as runsc answers a
// checkpoint made, its image written, without waiting to see the container stopped:
// for a caller that needs the image, not the stop, such as one that records it before
// a deadline. The container stops a moment later (tens of milliseconds; 0.4-0.8 s under
// a 1 % CPU limit), and runsc state may say "running" until it has. Everything else is
// Checkpoint's, the waits that judge a checkpoint whose exit status was lost included.
func (r *Runtime) CheckpointImage(ctx context.Context, id, imageDir string) error {
	return r.checkpoint(ctx, id, imageDir, false)
}

// checkpoint is Checkpoint, which awaits the stop of a checkpoint made, and
// CheckpointImage, which does not.
func (r *Runtime) checkpoint(ctx context.Context, id, imageDir string, awaitMade bool) error {
	if err := os.MkdirAll(imageDir, 0o700); err != nil {
		return r.NotBegun(ctx, id, fmt.Errorf("runsc checkpoint %s not started: making its image directory: %w", id, err))
	}
	_, msg, err := r.outputs(ctx, id, "checkpoint", "--image-path="+imageDir, id)
	if err == nil {
		// runsc answers once the image is written, before gVisor's sandbox process has
		// exited: returned then, the container still ran for a moment (row 1670). The
		// save is made whatever the wait finds: a wait cut by ctx (the hard deadline)
		// must not turn a written image into a failed checkpoint.
		if awaitMade {
			_ = r.awaitStop(ctx, id, StopWait)
		}
		return nil
	}
	if !errors.Is(err, ErrStopped) && controlServerGone(err.Error()) {
		// runsc found the sandbox running, then could not reach its control server,
		// whose process is now a zombie or gone: it exited as the checkpoint began (its
		// workload's exit, the OOM killer), and no save began that could have stopped
		// it. Taken for a checkpoint that failed, its sandbox was lost, not dead (row 1211).
		return fmt.Errorf("%w: %w: its sandbox process had exited before the checkpoint reached it", err, ErrStopped)
	}
	if err != nil && !errors.Is(err, ErrStopped) && callNeverRead(msg) {
		// The call never reached the sandbox: its control server refused the
		// connection, its process still ending (not yet a zombie: row 1211's check
		// missed it), or closed it with the call unread. No save began; taken for a
		// checkpoint that failed, a sandbox that had died was lost by it (row 1393).
		// Only the container stopped says it ended. It is looked at once: waited for
		// (up to StopWait), a sandbox that runs on held its caller whatever its
		// deadline, and a drain's escalation with it (row 1782). A retry tells.
		return r.notBegun(ctx, id, err, "its sandbox process ended before it read the checkpoint's call")
	}
	killed := killedBySignal(ctx, err)
	if !errors.Is(err, ErrStatusLost) && !killed || len(bytes.TrimSpace(msg)) > 0 {
		return err
	}
	bound := StopWait
	if killed && saveBegun(imageDir) {
		// The save reached the sandbox, which ends it whatever became of its client and
		// stops the container then, however long it takes (a sandbox of a few GB takes
		// longer than StopWait): waited for as the client would have. Judged at
		// StopWait, a save still going was "not checkpointed", and a caller's retry
		// removed the image it was writing: the sandbox lost, its image whole.
		bound = 0
	}
	if serr := r.awaitStop(ctx, id, bound); serr != nil {
		return fmt.Errorf("%w; runsc wrote no failure, but %w: not checkpointed", err, serr)
	}
	if killed && noSpaceLeft(imageDir) {
		return fmt.Errorf("%w; the container stopped, but the images volume has no space left: "+
			"taken for a save that failed for want of it (no space left on device)", err)
	}
	if cut := imageCut(imageDir); cut != nil {
		// No one answered, and the stop is the sandbox's end, not a save's: one killed
		// with its client mid-save left a header no restore takes. Taken as made, it
		// was recorded and listed paused, its state gone.
		return fmt.Errorf("%w; the container stopped, but its image is %w: a save that failed, not checkpointed", err, cut)
	}
	return nil
}

// NotBegun is the error of a checkpoint of container id that failed (err) before runsc
// was run (its image directory could not be made or cleared: a read-only or full images
// volume), so before any save began, which could have stopped the container. The
// container is looked at once, for NotBegunWait at most: stopped, it ended on its own
// (its workload's exit, the OOM killer) and the error wraps ErrStopped; otherwise
// ErrNotReached, for a retry to tell.
// Taken for a checkpoint that failed, a sandbox that then died on its own was called
// lost by it, or, never looked at, listed running though dead.
func (r *Runtime) NotBegun(ctx context.Context, id string, err error) error {
	return r.notBegun(ctx, id, err, "it had stopped before its checkpoint began")
}

// NotBegunWait bounds NotBegun's look at the container, whatever its context: a caller
// whose checkpoint is never cut (a context with no end) was held by a runsc state that
// hangs, its sandbox in transition, which a drain's escalation never signals.
const NotBegunWait = 5 * time.Second

// notBegun is NotBegun, which says stopped of a stopped container.
func (r *Runtime) notBegun(ctx context.Context, id string, err error, stopped string) error {
	ctx, cancel := context.WithTimeout(ctx, NotBegunWait)
	defer cancel()
	exited, serr := r.Exited(ctx, id)
	switch {
	case exited:
		return fmt.Errorf("%w: %w: %s", err, ErrStopped, stopped)
	case serr != nil:
		return fmt.Errorf("%w: %w; and its state cannot say whether it stopped: %w", err, ErrNotReached, serr)
	}
	return fmt.Errorf("%w: %w; its container is not stopped: it runs, or is still ending", err, ErrNotReached)
}

// callUnread is runsc's failure of a checkpoint whose call the sandbox process closed
// unread (a reset: data left in the socket), where one it read and did not answer ends
// in EOF.
const callUnread = `urpc method "containerManager.Checkpoint" failed: connection reset by peer`

// callNeverRead reports whether msg, a failed checkpoint's stderr, says its call never
// reached the sandbox: the control server refused the connection, or the sandbox closed
// it with the call unread.
func callNeverRead(msg []byte) bool {
	return controlServerPID.Match(msg) && bytes.Contains(msg, []byte("connection refused")) ||
		bytes.Contains(msg, []byte(callUnread))
}

// killedBySignal reports whether err is that of a runsc client a signal ended while ctx
// had not: another process killed it.
func killedBySignal(ctx context.Context, err error) bool {
	var exit *exec.ExitError
	if ctx.Err() != nil || !errors.As(err, &exit) {
		return false
	}
	ws, ok := exit.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled()
}

// saveBegun reports whether a checkpoint's save reached the sandbox: a file in imageDir
// holds bytes, which only the sandbox's save writes (runsc's client creates the image
// file empty).
func saveBegun(imageDir string) bool {
	entries, _ := os.ReadDir(imageDir)
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() && fi.Size() > 0 {
			return true
		}
	}
	return false
}

// StopWait bounds how long Checkpoint waits for the container to stop as a checkpoint
// made stops it: after one that succeeded, and after one whose exit status was lost and
// that wrote no failure.
const StopWait = 10 * time.Second

// awaitStop waits, at most bound (0: no bound of its own) and not past ctx, for container
// id to have exited (Exited), asking every zombiePoll; an error says why it is not known
// to have.
func (r *Runtime) awaitStop(ctx context.Context, id string, bound time.Duration) error {
	wctx, cancel := context.WithCancel(ctx)
	if bound > 0 {
		wctx, cancel = context.WithTimeout(ctx, bound)
	}
	defer cancel()
	tick := time.NewTicker(zombiePoll)
	defer tick.Stop()
	for {
		stopped, err := r.Exited(wctx, id)
		switch {
		case stopped:
			return nil
		case wctx.Err() != nil && bound > 0:
			return fmt.Errorf("the container had not stopped after %v (%w)", bound, context.Cause(wctx))
		case wctx.Err() != nil:
			return fmt.Errorf("the container had not stopped when the wait ended (%w)", context.Cause(wctx))
		case err != nil && !errors.Is(err, ErrStatusLost):
			return fmt.Errorf("its state cannot say whether the checkpoint stopped the container: %w", err)
		}
		select {
		case <-wctx.Done():
		case <-tick.C:
		}
	}
}

// Kill sends sig to the container's init process, or to every process in it when all is
// set (runsc kill [--all] id SIG).
func (r *Runtime) Kill(ctx context.Context, id string, sig syscall.Signal, all bool) error {
	args := []string{"kill"}
	if all {
		args = append(args, "--all")
	}
	_, err := r.output(ctx, id, append(args, id, fmt.Sprint(int(sig)))...)
	return err
}

// Wait blocks until the container's init process exits and returns its exit status as
// runsc reports it (128+n for a process killed by signal n). It returns ctx.Err() wrapped
// when the context ends first.
//
// runsc writes the status, {"id":"ID","exitStatus":N}, only once the container has
// exited, so a wait whose output is one returns it whatever became of the command's own
// exit status: one another reaper collected (ErrStatusLost, the ateom review's stolen
// wait) saw the exit all the same, where a runsc state asked after it is one more
// process, which a loaded machine's deadline may cut (docs/faults.md row 1210).
func (r *Runtime) Wait(ctx context.Context, id string) (int, error) {
	out, err := r.output(ctx, id, "wait", id)
	var w struct {
		ExitStatus *int `json:"exitStatus"`
	}
	if jerr := json.Unmarshal(out, &w); jerr == nil && w.ExitStatus != nil {
		return *w.ExitStatus, nil // runsc's word that it exited
	}
	if err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("runsc wait %s: unexpected output %q", id, out)
}

// State returns the container's OCI state.
func (r *Runtime) State(ctx context.Context, id string) (State, error) {
	var st State
	out, err := r.output(ctx, id, "state", id)
	if errors.Is(err, ErrStatusLost) && json.Unmarshal(out, &st) == nil && st.ID == id && st.Status != "" {
		return st, nil // the output is the state; only the exit status was stolen
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return st, fmt.Errorf("runsc state %s: %w in %q", id, err, out)
	}
	return st, nil
}

// Delete removes the container's resources; force also kills it if it runs
// (runsc delete [-force] id).
func (r *Runtime) Delete(ctx context.Context, id string, force bool) error {
	args := []string{"delete"}
	if force {
		args = append(args, "-force")
	}
	_, err := r.output(ctx, id, append(args, id)...)
	return err
}

// List returns the IDs of the containers in this Runtime's root.
func (r *Runtime) List(ctx context.Context) ([]string, error) {
	out, err := r.output(ctx, "", "list", "-quiet")
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(out)), nil
}

// DeleteAll force-deletes every container in this Runtime's root and returns the first
// error. Tests call it from t.Cleanup so no sandbox outlives them.
func (r *Runtime) DeleteAll(ctx context.Context) error {
	ids, err := r.List(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		if err := r.Delete(ctx, id, true); err != nil && !errors.Is(err, ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// command builds the exec.Cmd for one runsc invocation about container id ("" for none),
// bound to ctx.
func (r *Runtime) command(ctx context.Context, id string, args ...string) (*exec.Cmd, error) {
	if r.Root == "" {
		return nil, errors.New("runsc: Runtime.Root is required")
	}
	if args[0] != "list" && !validID.MatchString(id) {
		return nil, fmt.Errorf("runsc %s: invalid container id %q", args[0], id)
	}
	bin := r.Binary
	if bin == "" {
		bin = "runsc"
	}
	cmd := exec.CommandContext(ctx, bin, append(r.GlobalFlags(), args...)...)
	// A process group of its own: a terminal's Ctrl-C (SIGINT to the foreground group)
	// reaches the caller, which stops what it runs itself (ctx), and never runsc, which
	// it killed halfway: a restore in flight ended with no container and its RPC failed,
	// a run with no sandbox (row 1310). The caller's own SIGKILL never reached runsc.
	cmd.SysProcAttr = inOwnProcessGroup()
	cmd.WaitDelay = r.WaitDelay
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = time.Second
	}
	return cmd, nil
}

// output runs a command that does not leave a sandbox behind and returns its stdout.
func (r *Runtime) output(ctx context.Context, id string, args ...string) ([]byte, error) {
	stdout, _, err := r.outputs(ctx, id, args...)
	return stdout, err
}

// outputs is output that also returns the command's stderr.
func (r *Runtime) outputs(ctx context.Context, id string, args ...string) (stdout, stderr []byte, err error) {
	cmd, err := r.command(ctx, id, args...)
	if err != nil {
		return nil, nil, err
	}
	var out, msg bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &msg
	if err := cmd.Run(); err != nil {
		return out.Bytes(), msg.Bytes(), commandError(ctx, args, err, msg.Bytes())
	}
	return out.Bytes(), msg.Bytes(), nil
}

// detached runs run or restore: the sandbox they fork inherits their stdio, so it goes to a
// file and never to a pipe that would keep cmd.Wait waiting for the sandbox's exit.
func (r *Runtime) detached(ctx context.Context, id, logPath string, args ...string) error {
	cmd, err := r.command(ctx, id, args...)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("runsc %s: %w", args[0], err)
	}
	defer f.Close()
	start, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("runsc %s: %w", args[0], err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Run(); err != nil {
		err = commandError(ctx, args, err, readFrom(logPath, start, 2048))
		if errors.Is(err, ErrStatusLost) && r.runs(ctx, id) {
			return nil // it ran, and left the container running: made
		}
		return err
	}
	return nil
}

// runs reports whether container id runs, by runsc's state and, for its PID, the
// kernel's: what a run or restore whose exit status another reaper collected left when
// it succeeded. Its message cannot say, in a log the container's output shares, and a
// failed one leaves no container (runsc destroys what it began) or one not running.
// Taken for a failure, a restore that had succeeded was a sandbox its caller said was
// paused while it ran: a retry force-deleted it and restored the old image again, and a
// drain checkpointed none of it (row 1070).
func (r *Runtime) runs(ctx context.Context, id string) bool {
	st, err := r.State(ctx, id)
	return err == nil && st.Status == "running" && !(st.Pid > 0 && zombie(st.Pid))
}

// commandError turns a failed run into an error naming the command, wrapping ctx.Err()
// when the context ended it, ErrNotExist when runsc did not know the container, ErrStopped
// when it found it stopped, and ErrStatusLost when another reaper took the exit status:
// with runsc's message, when it wrote one, for it may say what the status cannot.
func commandError(ctx context.Context, args []string, err error, msg []byte) error {
	text := strings.TrimSpace(string(msg))
	name := strings.Join(args, " ")
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("runsc %s: %w (%v)", name, cerr, err)
	}
	var kind error
	switch {
	case strings.Contains(text, "file does not exist") || strings.Contains(text, "container does not exist"):
		kind = ErrNotExist
	case stoppedState.MatchString(text):
		kind = ErrStopped
	}
	lost := errors.Is(err, syscall.ECHILD)
	switch {
	case lost && text == "":
		return fmt.Errorf("runsc %s: %w: %w", name, ErrStatusLost, err)
	case lost && kind != nil:
		return fmt.Errorf("runsc %s: %w: %w: %w: %s", name, kind, ErrStatusLost, err, text)
	case lost:
		return fmt.Errorf("runsc %s: %w: %w: %s", name, ErrStatusLost, err, text)
	case kind != nil:
		return fmt.Errorf("runsc %s: %w: %s", name, kind, text)
	}
	return fmt.Errorf("runsc %s: %w: %s", name, err, text)
}

// readFrom returns at most max bytes of the file from offset off, for error messages.
func readFrom(path string, off int64, max int) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	buf := make([]byte, max)
	n, _ := f.ReadAt(buf, off)
	return buf[:n]
}
