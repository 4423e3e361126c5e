//go:build unix

package sandbox

import "syscall"

// volumeFreeOf returns what is free on the volume of dir, and whether statfs(2) could tell.
func volumeFreeOf(dir string) (volumeFree, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return volumeFree{}, false
	}
	return volumeFree{bytes: uint64(st.Bavail) * uint64(st.Bsize), inodes: st.Ffree, inodesKnown: st.Files > 0}, true
}
