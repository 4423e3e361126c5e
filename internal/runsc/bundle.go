package runsc

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// busyboxPaths are where Debian's busybox-static (and most distributions) put busybox.
var busyboxPaths = []string{"/bin/busybox", "/usr/bin/busybox", "/sbin/busybox"}

// applets are the busybox commands a bundle links into /bin.
var applets = []string{"sh", "sleep", "mkfifo", "cat", "echo", "true"}

// CounterFile is the file, relative to a bundle's rootfs, that [CounterArgs] writes.
const CounterFile = "counter"

// Bundle is an OCI bundle directory: Dir/config.json and Dir/rootfs.
type Bundle struct {
	Dir string
}

// Rootfs returns the bundle's root file system directory.
func (b Bundle) Rootfs() string { return filepath.Join(b.Dir, "rootfs") }

// Counter returns the number the [CounterArgs] workload last wrote, or an error wrapping
// fs.ErrNotExist before it wrote one.
func (b Bundle) Counter() (int, error) {
	counts, err := b.Counts()
	if err != nil {
		return 0, err
	}
	if len(counts) == 0 {
		return 0, fmt.Errorf("runsc: counter file holds no complete line: %w", fs.ErrNotExist)
	}
	return counts[len(counts)-1], nil
}

// Counts returns every number the [CounterArgs] workload wrote, in order. A sandbox that
// was only ever checkpointed and restored shows 1, 2, 3, ... without a gap or a restart.
func (b Bundle) Counts() ([]int, error) {
	data, err := os.ReadFile(filepath.Join(b.Rootfs(), CounterFile))
	if err != nil {
		return nil, err
	}
	// Only complete lines count: a sandbox may be stopped in the middle of a write.
	lines := strings.Split(string(data), "\n")
	counts := make([]int, 0, len(lines)-1)
	for _, line := range lines[:len(lines)-1] {
		n, err := strconv.Atoi(line)
		if err != nil {
			return nil, fmt.Errorf("runsc: counter file holds %q: %w", line, err)
		}
		counts = append(counts, n)
	}
	return counts, nil
}

// SandboxProcesses returns the PIDs of the gVisor processes (runsc-sandbox,
// runsc-gofer) that name dir, a bundle's directory, on their command line:
// what a container of that bundle runs, whether runsc's state knows it or
// not (a restore whose client was killed leaves them with no container).
func SandboxProcesses(dir string) []int {
	return processesWhose(func(_ int, cmd []byte) bool {
		return (bytes.HasPrefix(cmd, []byte("runsc-sandbox\x00")) || bytes.HasPrefix(cmd, []byte("runsc-gofer\x00"))) &&
			bytes.Contains(cmd, []byte(dir))
	})
}

// processesWhose returns the PIDs of the processes in /proc whose command line
// (NUL-separated, as /proc/PID/cmdline holds it) match takes; a process that ends
// while it is read is left out.
func processesWhose(match func(pid int, cmdline []byte) bool) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if match(pid, cmd) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// ConsecutiveFromOne reports whether counts is exactly 1, 2, ..., len(counts).
func ConsecutiveFromOne(counts []int) bool {
	for i, n := range counts {
		if n != i+1 {
			return false
		}
	}
	return true
}

// CounterArgs is a workload that counts from 1 in memory and appends each number as a line
// to /counter every 100 ms. It never reads the file back, so after a restore it goes on
// from where it was, while a fresh start begins again at 1. It waits with the shell's
// read -t on a FIFO instead of forking sleep, so a sandbox costs a few percent of a core
// under the ptrace platform, not a fifth.
func CounterArgs() []string {
	return []string{"/bin/sh", "-c",
		"mkfifo /tmp/tick && exec 3<>/tmp/tick; i=0; while true; do i=$((i+1)); echo $i >> /" +
			CounterFile + "; read -t 0.1 x <&3; done"}
}

// WriteBundle creates an OCI bundle in dir (created if missing) whose rootfs holds a static
// busybox and whose process runs args as root in new PID, network, IPC, UTS and mount
// namespaces, with a writable root, no capabilities and no new privileges.
func WriteBundle(dir string, args []string) (Bundle, error) {
	b := Bundle{Dir: dir}
	if len(args) == 0 {
		return b, errors.New("runsc: WriteBundle args must name a program")
	}
	bb, err := StaticBusybox()
	if err != nil {
		return b, err
	}
	bin := filepath.Join(b.Rootfs(), "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return b, err
	}
	if err := copyFile(bb, filepath.Join(bin, "busybox"), 0o755); err != nil {
		return b, err
	}
	for _, a := range applets {
		if err := os.Symlink("busybox", filepath.Join(bin, a)); err != nil && !os.IsExist(err) {
			return b, err
		}
	}
	data, err := json.MarshalIndent(newSpec(args), "", "  ")
	if err != nil {
		return b, err
	}
	return b, os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644)
}

// StaticBusybox returns the path of a statically linked busybox on this host, or an error
// saying how to get one. A dynamic busybox would not run inside an empty rootfs.
func StaticBusybox() (string, error) {
	for _, p := range busyboxPaths {
		if isStatic(p) {
			return p, nil
		}
	}
	return "", errors.New("runsc: no static busybox in " + strings.Join(busyboxPaths, ", ") +
		" (apt-get install busybox-static)")
}

// Usable reports why real sandboxes cannot run here: not root, no runsc in PATH, or no
// static busybox. Tests skip with its error, and servers (sandboxd's -runtime runsc, the
// gVisor worker) fail at start with it, so it says what their user must do; nil means
// they can run.
func Usable() error {
	if uid := os.Geteuid(); uid != 0 {
		return fmt.Errorf("runsc sandboxes need root, and this process runs as uid %d: run the server as root "+
			"(in a pod, a container that runs as root with securityContext privileged: true, as examples/sandboxd/deploy/daemonset.yaml), "+
			"or use the fake runtime", uid)
	}
	if _, err := exec.LookPath("runsc"); err != nil {
		return errors.New("runsc not found in PATH (apt-get install runsc)")
	}
	_, err := StaticBusybox()
	return err
}

// isStatic reports whether path is an ELF executable without a program interpreter.
func isStatic(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return f.Type == elf.ET_EXEC || f.Type == elf.ET_DYN
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// The subset of the OCI runtime spec that a minimal bundle needs.
type (
	spec struct {
		OCIVersion string  `json:"ociVersion"`
		Process    process `json:"process"`
		Root       root    `json:"root"`
		Hostname   string  `json:"hostname"`
		Mounts     []mount `json:"mounts"`
		Linux      linux   `json:"linux"`
	}
	process struct {
		User            user     `json:"user"`
		Args            []string `json:"args"`
		Env             []string `json:"env"`
		Cwd             string   `json:"cwd"`
		NoNewPrivileges bool     `json:"noNewPrivileges"`
	}
	user struct {
		UID uint32 `json:"uid"`
		GID uint32 `json:"gid"`
	}
	root struct {
		Path     string `json:"path"`
		Readonly bool   `json:"readonly"`
	}
	mount struct {
		Destination string   `json:"destination"`
		Type        string   `json:"type"`
		Source      string   `json:"source"`
		Options     []string `json:"options,omitempty"`
	}
	linux struct {
		Namespaces []namespace `json:"namespaces"`
	}
	namespace struct {
		Type string `json:"type"`
	}
)

func newSpec(args []string) spec {
	return spec{
		OCIVersion: "1.0.0",
		Process: process{
			Args:            args,
			Env:             []string{"PATH=/bin"},
			Cwd:             "/",
			NoNewPrivileges: true,
		},
		Root:     root{Path: "rootfs"},
		Hostname: "sandbox",
		Mounts: []mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs"},
			{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs"},
		},
		Linux: linux{Namespaces: []namespace{
			{Type: "pid"}, {Type: "network"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"},
		}},
	}
}
