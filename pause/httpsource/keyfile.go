package httpsource

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/drainkit/drainkit/internal/logonce"
)

// keyFile is Config.APIKeyFile: the key it held when last read, read again
// when the file changed.
type keyFile struct {
	path string

	mu     sync.Mutex
	key    string
	stamp  fileStamp
	failed logonce.Failures // the reads failed since the last that did not, so that a failure is logged once
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
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = sys.Ino
	}
	return st
}

// readKeyFile reads path for New: an error names Config.APIKeyFile.
func readKeyFile(path string) (*keyFile, error) {
	k := &keyFile{path: path}
	key, stamp, err := k.read()
	if err != nil {
		return nil, fmt.Errorf("httpsource: Config.APIKeyFile: %w", err)
	}
	k.key, k.stamp = key, stamp
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

// get returns the key, read again if the file changed since; a read that
// fails keeps the last key.
func (k *keyFile) get(log *slog.Logger) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	fi, err := os.Stat(k.path)
	if err == nil && stampOf(fi).same(k.stamp) {
		return k.key
	}
	key, stamp, err := k.read()
	if err != nil {
		if news, _ := k.failed.Fail(err.Error()); news {
			log.Warn("httpsource: the API key file could not be read again: the last key is sent", "file", k.path, "error", err)
		}
		return k.key
	}
	if key != k.key {
		log.Info("httpsource: the API key file changed: the new key is sent", "file", k.path)
	}
	k.key, k.stamp = key, stamp
	k.failed.OK() // a read that works again is not logged as such: a new key is, above
	return k.key
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
