package vmtest

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// libDirs are where the shared libraries of a dynamically linked guest
// binary are looked for on this machine.
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// sharedLibs returns the files a dynamically linked bin needs at run time:
// its ELF interpreter and its DT_NEEDED libraries, found on this machine.
// A static binary needs none.
func sharedLibs(bin string) ([]string, error) {
	f, err := elf.Open(bin)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			return nil, err
		}
		out = append(out, strings.TrimRight(string(b), "\x00"))
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return nil, err
	}
	for _, lib := range libs {
		found := ""
		for _, d := range libDirs {
			if p := filepath.Join(d, lib); fileExists(p) {
				found = p
				break
			}
		}
		if found == "" {
			return nil, fmt.Errorf("vmtest: %s needs %s, not found in %s", bin, lib, strings.Join(libDirs, ", "))
		}
		out = append(out, found)
	}
	return out, nil
}

// libEntries returns initramfs entries for the shared libraries bin
// needs: each at its own path, and also in /lib64, which the dynamic
// loader searches without an ld.so.cache.
func libEntries(bin string) ([]entry, error) {
	libs, err := sharedLibs(bin)
	if err != nil {
		return nil, err
	}
	var out []entry
	seen := map[string]bool{}
	for _, l := range libs {
		data, err := os.ReadFile(l) // follows symlinks
		if err != nil {
			return nil, err
		}
		for _, p := range []string{l, filepath.Join("/lib64", filepath.Base(l))} {
			if !seen[p] {
				seen[p] = true
				out = append(out, fileEntry(p, 0o755, data))
			}
		}
	}
	return out, nil
}
