package vmtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// DirEnv names the environment variable that points at the asset
// directory, overriding the default cache locations.
const DirEnv = "DRAINKIT_VM_DIR"

// Assets is what a boot needs from the machine: a kernel, its modules and
// the emulator. .ci/setup-ublk-vm fills an asset directory:
//
//	<dir>/vmlinuz        the guest kernel
//	<dir>/release        its release string (uname -r), one line
//	<dir>/modules/*.ko*  modules, plain or compressed (.ko.xz)
type Assets struct {
	Dir     string // the asset directory
	Kernel  string // path of the kernel image
	Release string // the kernel's release string
	QEMU    string // path of qemu-system-x86_64
}

// DefaultDirs returns the asset directories searched in order: $DRAINKIT_VM_DIR
// when set (and then only it), else /var/cache/drainkit-vm and
// $HOME/.cache/drainkit-vm.
func DefaultDirs() []string {
	if d := os.Getenv(DirEnv); d != "" {
		return []string{d}
	}
	dirs := []string{"/var/cache/drainkit-vm"}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, ".cache", "drainkit-vm"))
	}
	return dirs
}

// FindAssets looks for a kernel in dirs (DefaultDirs when empty) and for
// qemu-system-x86_64 on PATH. The error says what is missing and how to
// get it; the Assets hold what was found even then.
func FindAssets(dirs ...string) (Assets, error) {
	if len(dirs) == 0 {
		dirs = DefaultDirs()
	}
	var a Assets
	for _, d := range dirs {
		if fileExists(filepath.Join(d, "vmlinuz")) {
			a.Dir = d
			break
		}
	}
	if a.Dir == "" {
		return a, fmt.Errorf("vmtest: no guest kernel (vmlinuz) in %s; run .ci/setup-ublk-vm or set %s",
			strings.Join(dirs, ", "), DirEnv)
	}
	a.Kernel = filepath.Join(a.Dir, "vmlinuz")
	if b, err := os.ReadFile(filepath.Join(a.Dir, "release")); err == nil {
		a.Release = strings.TrimSpace(string(b))
	}
	q, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return a, errors.New("vmtest: qemu-system-x86_64 not found on PATH; run .ci/setup-ublk-vm " +
			"(apt-get install qemu-system-x86)")
	}
	a.QEMU = q
	return a, nil
}

// Module returns the path of the module file for name (for example
// "ublk_drv"), plain or compressed.
func (a Assets) Module(name string) (string, error) {
	for _, ext := range []string{".ko", ".ko.xz", ".ko.zst", ".ko.gz"} {
		p := filepath.Join(a.Dir, "modules", name+ext)
		if fileExists(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("vmtest: module %s not found in %s", name, filepath.Join(a.Dir, "modules"))
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
