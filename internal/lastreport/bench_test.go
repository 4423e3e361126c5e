package lastreport

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/drainkit/drainkit/internal/durable"
)

// BenchmarkRewrite measures one rewrite of a drain's account, as the rate bound (Every)
// pays it: a 64 KiB account (about 100 sandboxes' entries) written, fsynced and renamed
// into place, the directory fsynced.
func BenchmarkRewrite(b *testing.B) {
	path := filepath.Join(b.TempDir(), "last-shutdown.json")
	data := bytes.Repeat([]byte("x"), 64<<10)
	for b.Loop() {
		if err := durable.WriteFile(path, data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
}
