package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A tree with a public package, an internal one, an example and a test
// file: only the public package's exported names count, fields and methods
// included.
func TestCountsOnlyWhatAUserCanName(t *testing.T) {
	root := t.TempDir()
	write := func(path, src string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, path)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, path), []byte(src), 0o644))
	}
	write("pub/a.go", `package pub
const A, b = 1, 2
var V int
type T struct{ F, g int }
func (T) M() {}
func (*T) m() {}
type I interface{ Do(); do() }
func New() T { return T{} }
type hidden struct{ X int }
func (hidden) Y() {}
`)
	write("pub/a_test.go", "package pub\nfunc TestX() {}\n")
	write("internal/x/x.go", "package x\nfunc Secret() {}\n")
	write("examples/e/e.go", "package e\nfunc Shown() {}\n")
	write("cmd/tool/main.go", "package main\nfunc Main() {}\n")

	pkgs, err := count(root)
	require.NoError(t, err)
	assert.Equal(t, map[string][]string{"pub": {"A", "V", "T", "T.F", "T.M", "I", "I.Do", "New"}}, pkgs)
	assert.Equal(t, []string{"A", "V", "T", "I", "New"}, topLevel(pkgs["pub"]))
}
