package vmtest

import (
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// Mode bits of the newc cpio format (the same as st_mode).
const (
	cpioDir  = 0o040000
	cpioFile = 0o100000
	cpioChar = 0o020000
)

// entry is one member of an initramfs archive.
type entry struct {
	name         string // path inside the archive, without a leading slash
	mode         uint32 // type bits | permission bits
	data         []byte // contents of a regular file
	major, minor uint32 // device numbers of a character device
}

// writeInitramfs writes entries as a gzipped newc cpio archive, the format
// the kernel unpacks into its rootfs before running /init. Parent
// directories missing from entries are added, so a file "a/b/c" needs no
// separate "a" and "a/b" entries. Entries are written parents first.
func writeInitramfs(w io.Writer, entries []entry) error {
	zw, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if err != nil {
		return err
	}
	ino := uint32(1)
	for _, e := range withParents(entries) {
		if err := writeCpioEntry(zw, ino, e); err != nil {
			return fmt.Errorf("vmtest: initramfs entry %q: %w", e.name, err)
		}
		ino++
	}
	if err := writeCpioEntry(zw, ino, entry{name: "TRAILER!!!"}); err != nil {
		return err
	}
	return zw.Close()
}

// withParents returns entries plus a directory entry for every missing
// parent, sorted so that each directory precedes its contents.
func withParents(entries []entry) []entry {
	have := map[string]bool{}
	var out []entry
	for _, e := range entries {
		e.name = strings.TrimPrefix(path.Clean("/"+e.name), "/")
		have[e.name] = true
		out = append(out, e)
	}
	for _, e := range out {
		for dir := path.Dir(e.name); dir != "." && !have[dir]; dir = path.Dir(dir) {
			have[dir] = true
			out = append(out, entry{name: dir, mode: cpioDir | 0o755})
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		return strings.Count(out[i].name, "/") < strings.Count(out[j].name, "/")
	})
	return out
}

// writeCpioEntry writes one newc header, the name and the data, each padded
// to a multiple of four bytes as the format requires.
func writeCpioEntry(w io.Writer, ino uint32, e entry) error {
	nlink := uint32(1)
	if e.mode&0o170000 == cpioDir {
		nlink = 2
	}
	fields := []uint32{
		ino, e.mode, 0, 0, nlink, 0, uint32(len(e.data)),
		0, 0, e.major, e.minor, uint32(len(e.name) + 1), 0,
	}
	var hdr strings.Builder
	hdr.WriteString("070701")
	for _, f := range fields {
		fmt.Fprintf(&hdr, "%08X", f)
	}
	hdr.WriteString(e.name)
	hdr.WriteByte(0)
	for hdr.Len()%4 != 0 {
		hdr.WriteByte(0)
	}
	if _, err := io.WriteString(w, hdr.String()); err != nil {
		return err
	}
	if _, err := w.Write(e.data); err != nil {
		return err
	}
	_, err := w.Write(make([]byte, (4-len(e.data)%4)%4))
	return err
}

// fileEntry is a regular file entry with permission bits perm.
func fileEntry(name string, perm fs.FileMode, data []byte) entry {
	return entry{name: name, mode: cpioFile | uint32(perm.Perm()), data: data}
}
