package gobuild

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Env is what Program adds to the environment of go build: a static
// binary, without the VCS stamp, after whatever GOFLAGS the caller's
// environment sets (CI sets the compiler's flags there, and its ahead build
// uses the same).
func Env() []string {
	flags := strings.TrimSpace(os.Getenv("GOFLAGS") + " -buildvcs=false")
	return []string{"CGO_ENABLED=0", "GOFLAGS=" + flags}
}

// Program builds the main package pkg of this module into dir and returns
// the binary's path, dir/<the package's last element>. pkg is an import
// path or a path relative to the module root ("./examples/sandboxd"). The
// build runs in the module root with Env and -trimpath; its error carries
// the go command's output.
func Program(dir, pkg string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), Env()...)
	if data, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("gobuild: go build %s: %w\n%s", pkg, err, data)
	}
	return out, nil
}

// ModuleRoot returns the directory of the go.mod the go command sees from
// the working directory (a test runs in its package's directory).
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("gobuild: go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("gobuild: not inside a Go module")
	}
	return filepath.Dir(mod), nil
}
