package httpsource

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/drainkit/drainkit/internal/logonce"
)

// keyFile is Config.APIKeyFile: the key it held when last read, read again
// when the file changed, and what the server answered to it.
type keyFile struct {
	path string
	sent atomic.Uint64 // requests sent with a key of the file: the seq of the last

	mu       sync.Mutex
	key      string
	gen      uint64    // the key's version: 1 at New, one more at each change
	since    time.Time // when this key was read first
	stamp    fileStamp
	failed   logonce.Failures // the reads failed since the last that did not, so that a failure is logged once
	accepted keyUse           // the last request with a 2xx answer (zero: none)
	refused  uint64           // the gen whose refusal was logged, until a later one is accepted
}

// A keyUse is one request's use of the file's key: which version it sent,
// its place among the requests sent (seq), and how many had been sent when
// its answer came (answered).
type keyUse struct {
	gen, seq, answered uint64
}

// fileStamp tells a file's versions apart: a Kubernetes Secret volume
// swaps a new directory in (a new inode), an editor may rewrite in place
// (a new size or modification time).
type fileStamp struct {
	ino   uint64
	size  int64
	mtime time.Time
}

func (s fileStamp) same(o fileStamp) bool {
	return s.ino == o.ino && s.size == o.size && s.mtime.Equal(o.mtime)
}

func stampOf(fi os.FileInfo) fileStamp {
	st := fileStamp{size: fi.Size(), mtime: fi.ModTime()}
	st.ino = inode(fi)
	return st
}

// readKeyFile reads path for New: an error names Config.APIKeyFile.
func readKeyFile(path string) (*keyFile, error) {
	k := &keyFile{path: path}
	key, stamp, err := k.read()
	if err != nil {
		return nil, fmt.Errorf("httpsource: Config.APIKeyFile: %w", err)
	}
	k.key, k.stamp, k.gen, k.since = key, stamp, 1, time.Now()
	return k, nil
}

// read reads the key and the stamp of the version read.
func (k *keyFile) read() (string, fileStamp, error) {
	f, err := os.Open(k.path)
	if err != nil {
		return "", fileStamp{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fileStamp{}, err
	}
	b, err := io.ReadAll(io.LimitReader(f, 64<<10)) // a key, not a file to load whole
	if err != nil {
		return "", fileStamp{}, err
	}
	key := strings.TrimSpace(string(b))
	if key == "" {
		return "", fileStamp{}, fmt.Errorf("%s is empty", k.path)
	}
	if flaw := headerFlaw(key); flaw != "" {
		return "", fileStamp{}, fmt.Errorf("%s: %s", k.path, flaw)
	}
	return key, stampOf(fi), nil
}

// send returns the key for a request about to be sent, read again if the
// file changed since (a read that fails keeps the last key), and the
// request's use of it.
func (k *keyFile) send(log *slog.Logger) (string, keyUse) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.reread(log)
	return k.key, keyUse{gen: k.gen, seq: k.sent.Add(1)}
}

// answered returns u with the requests sent so far: its answer has come.
func (k *keyFile) answered(u keyUse) keyUse {
	u.answered = k.sent.Load()
	return u
}

// reread reads the file again if it changed since it was last read.
func (k *keyFile) reread(log *slog.Logger) {
	fi, err := os.Stat(k.path)
	if err == nil && stampOf(fi).same(k.stamp) {
		return
	}
	key, stamp, err := k.read()
	if err != nil {
		if news, _ := k.failed.Fail(err.Error()); news {
			log.Warn("httpsource: the API key file could not be read again: the last key is sent", "file", k.path, "error", err)
		}
		return
	}
	if key != k.key {
		log.Info("httpsource: the API key file changed: the new key is sent", "file", k.path)
		k.key, k.gen, k.since = key, k.gen+1, time.Now()
	}
	k.stamp = stamp
	k.failed.OK() // a read that works again is not logged as such: a new key is, above
}

// accept records that the server answered u with a 2xx: its key is
// accepted. The first acceptance after a logged refusal is logged.
func (k *keyFile) accept(u keyUse, log *slog.Logger) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if u.seq > k.accepted.seq {
		k.accepted = u
	}
	if k.refused != 0 && u.gen > k.refused {
		log.Info("httpsource: the server accepts the API key from Config.APIKeyFile", "file", k.path)
		k.refused = 0
	}
}

// refusal returns the error of se, an answer to a request that sent the
// file's key (u), when it is a refusal of that key: 401 or 403, unless the
// server accepted the same key for a request sent after prev came back,
// the answer count (keyUse.answered) of the refusal the same requests got
// before (a sandbox's last pause; 0: none), which shows the key good after
// it and the refusal these requests' own (a 403 for one sandbox). Only the
// same requests' refusal counts: the key accepted after another sandbox's
// own refusal says nothing of a rotation since. That error is transient: a
// key rotated in a mounted Secret reaches the file up to a minute or more
// after the server has it (the kubelet's sync period and its cache), and
// the retry sends what the file holds then. The first refusal of each
// version of the key is logged. Nil for any other answer.
func (k *keyFile) refusal(se *StatusError, u keyUse, prev uint64, log *slog.Logger) error {
	if se.StatusCode != http.StatusUnauthorized && se.StatusCode != http.StatusForbidden {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if prev != 0 && k.accepted.gen == u.gen && k.accepted.seq > prev {
		return nil
	}
	unchanged := time.Since(k.since).Round(time.Millisecond)
	state := fmt.Sprintf("unchanged for %v", unchanged)
	switch {
	case u.gen != k.gen:
		state = "changed since: the retry sends the new key"
	case k.refused != u.gen:
		log.Info("httpsource: the server refused the API key from Config.APIKeyFile: requests are retried while time is left, "+
			"the file read again before each, until it holds a key the server accepts "+
			"(a key rotated in a mounted Secret reaches the file up to a minute or more after the server has it)",
			"file", k.path, "status", se.StatusCode, "key_unchanged_for", unchanged)
		k.refused = u.gen
	}
	return &keyRefusedError{
		err: fmt.Errorf("%w: the key from Config.APIKeyFile %s (%s) was refused; retried while time is left, "+
			"for a key rotated in a mounted Secret reaches the file up to a minute or more after the server has it", se, k.path, state),
		k: k, use: u, log: log,
	}
}

// keyPoll is how often a wait for the key file to change reads it (its
// stat; the key only when that changed): the key reaches
// the retries this long after the file at most, where it reached them
// after the Preserver's backoff (its waits grow to 10 s, jitter 0.5: up
// to 15 s).
const keyPoll = 100 * time.Millisecond

// A keyRefusedError is the transient error of a refusal of the key from
// Config.APIKeyFile (see keyFile.refusal): its WaitRetry ends the
// Preserver's backoff wait when the key changes (see pause.Sandbox).
type keyRefusedError struct {
	err error // the message, wrapping the *StatusError
	k   *keyFile
	use keyUse // the refused request's
	log *slog.Logger
}

func (e *keyRefusedError) Error() string { return e.err.Error() }
func (e *keyRefusedError) Unwrap() error { return e.err }

// WaitRetry returns when a retry may be answered otherwise than the
// refused request: the file holds another key than the one it sent (read
// again every keyPoll), or the server accepted that key for a request
// sent after the refusal came back (the refusal was then the request's
// own, and a refusal of the retry is permanent); or when ctx ends.
func (e *keyRefusedError) WaitRetry(ctx context.Context) {
	if e.k.moved(e.use, e.log) {
		return
	}
	t := time.NewTicker(keyPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if e.k.moved(e.use, e.log) {
				return
			}
		}
	}
}

// moved reports whether a retry of u's refused request may be answered
// otherwise (see keyRefusedError.WaitRetry), the file read again if it
// changed: a stat, as before every request. The waits are as many as the
// Preserver's limit at most, each a stat every keyPoll.
func (k *keyFile) moved(u keyUse, log *slog.Logger) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.reread(log)
	return k.gen != u.gen || k.accepted.gen == u.gen && k.accepted.seq > u.answered
}

// headerFlaw describes the first byte of key that no HTTP header can
// carry, a control character other than a tab, or returns "" when there
// is none. Go's transport refuses a request with such a header before it
// sends it, an error with no answer that a retry cannot mend. It never
// shows the key.
func headerFlaw(key string) string {
	for i := range len(key) {
		if b := key[i]; b < ' ' && b != '\t' || b == 0x7f {
			hint := ""
			if b == '\n' || b == '\r' {
				hint = " (a line break: a key of two lines?)"
			}
			return fmt.Sprintf("byte %d of %d is %#02x, a control character no HTTP header can carry%s", i+1, len(key), b, hint)
		}
	}
	return ""
}
