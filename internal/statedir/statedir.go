package statedir

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/drainkit/drainkit/internal/durable"
)

// LockFile is the file in the state directory that the lock is taken on, unless
// Config.File names another.
const LockFile = "state.lock"

// Defaults of Config's zero fields.
const (
	// DefaultLogEvery is Config.LogEvery's default.
	DefaultLogEvery = 10 * time.Second
	// DefaultPoll is Config.Poll's default.
	DefaultPoll = 100 * time.Millisecond
)

// Config configures Acquire. The zero value waits until ctx ends, logs nothing and names
// its owner by $POD_NAME or the host name.
type Config struct {
	// File is the lock file's name in the directory; empty: LockFile. A lock that guards
	// one file of the directory, not all of it, has its own (internal/learned's).
	File string
	// Owner names this process in the lock file, beside its PID, for a server waiting for
	// the directory: the pod's name. Empty: $POD_NAME (the downward API's pod name, as the
	// servers' manifests set it), else the host name.
	Owner string
	// Logger gets the waiting lines (WARN) and the line saying the lock was taken after a
	// wait (INFO); nil logs nothing.
	Logger *slog.Logger
	// LogEvery is how often a waiting Acquire says again that it is waiting; zero:
	// DefaultLogEvery.
	LogEvery time.Duration
	// Poll is how often a waiting Acquire tries the lock again, so the longest it goes on
	// waiting once the holder has exited; zero: DefaultPoll.
	Poll time.Duration
}

// Holder is what the lock file says of the process holding the lock.
type Holder struct {
	// PID is the holder's process ID, in its own PID namespace.
	PID int `json:"pid"`
	// Owner is Config.Owner's value: the holder's pod.
	Owner string `json:"owner"`
	// Since is when it took the lock.
	Since time.Time `json:"since"`
}

// String names the holder in a log line or an error: "pid 12 (sandboxd-7xk2p) since
// 2026-12-02T00:30:00Z", or "an unknown process" when the file does not say.
func (h Holder) String() string {
	if h.PID == 0 {
		return "an unknown process"
	}
	who := fmt.Sprintf("pid %d", h.PID)
	if h.Owner != "" {
		who += " (" + h.Owner + ")"
	}
	return who + " since " + h.Since.UTC().Format(time.RFC3339)
}

// A Lock is the held lock of a state directory.
type Lock struct {
	f   *os.File
	dir string
}

// Dir returns the state directory the lock is held on.
func (l *Lock) Dir() string { return l.dir }

// RemoveTemps removes the temporary files that writes of the file name in
// the directory (durable.WriteFile) left when a crash cut them short: a
// SIGKILL between a write's create and its rename leaves one that no later
// write reuses, one more for every such crash on a directory that outlives
// the process. It logs what it removed (INFO) and what it could not
// (WARN) on logger, nil: nowhere. Call it only for a file that holders of
// this lock alone write: a write in flight would have its file removed
// and fail. A released Lock (or nil) removes nothing: it holds nothing.
func (l *Lock) RemoveTemps(name string, logger *slog.Logger) {
	if l == nil || l.f == nil {
		return
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	path := filepath.Join(l.dir, name)
	removed, err := durable.RemoveTemps(path)
	if len(removed) > 0 {
		logger.Info("removed what a write cut short left (a crash, a SIGKILL between its create and its rename)",
			"file", path, "removed", removed)
	}
	if err != nil {
		logger.Warn("what a write cut short left could not all be removed", "file", path, "error", err)
	}
}

// Release releases the lock: the next server waiting for the directory takes it. Call it
// once the server has stopped touching the directory; a server that exits without it
// releases the lock all the same (the kernel does). Release is idempotent.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the only descriptor of the open file releases the flock
	l.f = nil
	return err
}

// Acquire takes the exclusive lock of the state directory dir, creating dir (mode 0700)
// and its lock file if need be, and writes this process's Holder into the file. While
// another process holds the lock it waits: it logs that it waits and for whom at once and
// every cfg.LogEvery, tries again every cfg.Poll, and returns as soon as it has the lock.
//
// On failure it returns an error naming dir, and the holder when there is one: when ctx
// ends first (the error wraps context.Cause(ctx): a server's SIGTERM ends the wait through
// its context, internal/startsig's Catcher.Context, with the cause "SIGTERM received"), or when
// dir or the lock file cannot be made or locked. It has then touched nothing in dir but
// the lock file.
func Acquire(ctx context.Context, dir string, cfg Config) (*Lock, error) {
	if cfg.LogEvery <= 0 {
		cfg.LogEvery = DefaultLogEvery
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := durable.MkdirAll(dir, 0o700); err != nil { // what is kept in it needs its entry kept
		return nil, fmt.Errorf("state directory: %w", err)
	}
	return acquire(dir, cfg, func(f *os.File) error { return wait(ctx, f, dir, cfg) })
}

// A HeldError is TryAcquire's error when another process holds the lock.
type HeldError struct {
	// Path is the lock file's.
	Path string
	// Holder is what the lock file says of the process holding the lock.
	Holder Holder
}

// Error names the lock file and what it says of the process holding it
// (Holder.String).
func (e *HeldError) Error() string { return e.Path + ": held by " + e.Holder.String() }

// TryAcquire takes the lock as Acquire does, without waiting and without creating dir:
// a *HeldError when another process holds it. Of cfg it reads File and Owner.
func TryAcquire(dir string, cfg Config) (*Lock, error) {
	return acquire(dir, cfg, func(f *os.File) error { return &HeldError{Path: f.Name(), Holder: holderOf(f.Name())} })
}

// acquire opens dir's lock file and takes its lock, calling held when another process
// holds it (its error is acquire's, its nil that held took the lock), and writes this
// process as the holder.
func acquire(dir string, cfg Config, held func(*os.File) error) (*Lock, error) {
	name := cmp.Or(cfg.File, LockFile)
	// Never O_TRUNC: the file names the holder for whoever waits.
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state directory %s: %w", dir, err)
	}
	ok, err := tryLock(f)
	if err == nil && !ok {
		err = held(f)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	if err := writeHolder(f, cfg.Owner); err != nil {
		f.Close()
		return nil, fmt.Errorf("state directory %s: writing the holder into %s: %w", dir, name, err)
	}
	return &Lock{f: f, dir: dir}, nil
}

// wait waits until tryLock takes f's lock or ctx ends.
func wait(ctx context.Context, f *os.File, dir string, cfg Config) error {
	start := time.Now()
	holder := holderOf(f.Name())
	cfg.Logger.Warn("state directory held by another server; waiting for it to exit before touching it",
		"dir", dir, "holder", holder.String())
	poll := time.NewTicker(cfg.Poll)
	defer poll.Stop()
	say := time.NewTicker(cfg.LogEvery)
	defer say.Stop()
	gaveUp := func(why error) error {
		return fmt.Errorf("state directory %s: gave up waiting after %v for %s, which holds it: %w",
			dir, time.Since(start).Round(time.Millisecond), holder, why)
	}
	for {
		select {
		case <-ctx.Done():
			return gaveUp(context.Cause(ctx))
		case <-say.C:
			holder = holderOf(f.Name())
			cfg.Logger.Warn("still waiting for the state directory", "dir", dir, "holder", holder.String(),
				"waited", time.Since(start).Round(time.Second))
		case <-poll.C:
			ok, err := tryLock(f)
			if err != nil {
				return err
			}
			if ok {
				cfg.Logger.Info("state directory taken", "dir", dir, "waited", time.Since(start).Round(time.Millisecond),
					"after", holder.String())
				return nil
			}
		}
	}
}

// ReadHolder reads the holder record from the lock file at path, as Acquire writes it
// there when it takes the lock. The error is the file's read alone (no such file: the
// lock file removed); a file that does not parse, or says nothing yet (a holder that has
// not written: Acquire truncates, then writes), gives the zero Holder and no error. The
// waits of this package name the zero Holder "unknown"; internal/learned tells a lock
// file gone (the error) from one another server made since.
func ReadHolder(path string) (Holder, error) {
	var h Holder
	data, err := os.ReadFile(path)
	if err == nil {
		_ = json.Unmarshal(data, &h)
	}
	return h, err
}

// holderOf is the holder record of the lock file at path for a wait's lines and
// errors: the zero Holder ("unknown") when it cannot be read.
func holderOf(path string) Holder {
	h, _ := ReadHolder(path)
	return h
}

// writeHolder writes this process as the holder into f, whose lock it holds.
func writeHolder(f *os.File, owner string) error {
	if owner == "" {
		owner = os.Getenv("POD_NAME")
	}
	if owner == "" {
		owner, _ = os.Hostname()
	}
	data, err := json.Marshal(Holder{PID: os.Getpid(), Owner: owner, Since: time.Now()})
	if err != nil {
		return err
	}
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.WriteAt(append(data, '\n'), 0); err != nil {
		return err
	}
	return f.Sync()
}
