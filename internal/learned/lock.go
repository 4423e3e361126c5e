package learned

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// LockFile is the file in the state directory whose lock says which
// server owns File: the one that holds it writes File, the others read it.
const LockFile = "learned-rates.lock"

// lockPoll is how often a server that found the lock held tries it again.
const lockPoll = 100 * time.Millisecond

// errHeld is tryLock's answer when another process holds the lock.
var errHeld = errors.New("held by another process")

// A holder is what the lock file says of the process holding the lock.
type holder struct {
	PID   int       `json:"pid"`
	Owner string    `json:"owner,omitempty"`
	Since time.Time `json:"since"`
}

// String names the holder in a log line: "pid 12 (agentenv-node-7xk2p)
// since 2026-12-02T00:30:00Z", or "an unknown process".
func (h holder) String() string {
	if h.PID == 0 {
		return "an unknown process"
	}
	who := fmt.Sprintf("pid %d", h.PID)
	if h.Owner != "" {
		who += " (" + h.Owner + ")"
	}
	return who + " since " + h.Since.UTC().Format(time.RFC3339)
}

// tryLock takes dir's lock without waiting and writes this process into
// the lock file; errHeld when another process holds it. The kernel
// releases the lock when the file is closed or the process ends, however
// it ends.
func tryLock(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, LockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := flock(f); err != nil {
		f.Close()
		return nil, err
	}
	owner := os.Getenv("POD_NAME")
	if owner == "" {
		owner, _ = os.Hostname()
	}
	b, _ := json.Marshal(holder{PID: os.Getpid(), Owner: owner, Since: time.Now()})
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt(append(b, '\n'), 0) // for the log of a server that finds it held
	}
	return f, nil
}

// readHolder reads who holds dir's lock, as the holder wrote it.
func readHolder(dir string) holder {
	var h holder
	b, err := os.ReadFile(filepath.Join(dir, LockFile))
	if err == nil {
		_ = json.Unmarshal(b, &h)
	}
	return h
}
