//go:build unix

package httpsource

import (
	"os"
	"syscall"
)

// inode is fi's inode number, which tells a key file replaced by a rename (a Secret's
// update) from the one read before.
func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}
