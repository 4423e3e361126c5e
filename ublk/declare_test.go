package ublk

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/ublkhook"
)

func TestKernelDeclarationsFromFileAndFlag(t *testing.T) {
	file := filepath.Join(t.TempDir(), "kernels")
	require.NoError(t, os.WriteFile(file, []byte(`# noble, verified against the USN
fixed        6.8.0-1[0-9][0-9]-generic   # the CVE update and later

vulnerable   6.8.0-*-generic
exit-may-hang 6.14.6-*
`), 0o600))
	var ds KernelDeclarations
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Var(&ds, "ublk-kernel", "kernel declaration")
	require.NoError(t, fs.Parse([]string{"-ublk-kernel=fixed=6.12.*+deb13-*", "-ublk-kernel=@" + file}))
	assert.Equal(t, KernelDeclarations{
		{Pattern: "6.12.*+deb13-*", Class: KernelFixed, Source: "flag"},
		{Pattern: "6.8.0-1[0-9][0-9]-generic", Class: KernelFixed, Source: file + ":2"},
		{Pattern: "6.8.0-*-generic", Class: KernelVulnerable, Source: file + ":4"},
		{Pattern: "6.14.6-*", Class: KernelExitMayHang, Source: file + ":5"},
	}, ds)
	assert.Equal(t, "fixed=6.12.*+deb13-*,fixed=6.8.0-1[0-9][0-9]-generic,vulnerable=6.8.0-*-generic,exit-may-hang=6.14.6-*", ds.String())

	td, err := New(nil, Config{Kernels: ds, hooks: ublkhook.Hooks{KernelRelease: "6.8.0-110-generic"}})
	require.NoError(t, err)
	d := td.KernelDecision()
	assert.Equal(t, KernelFixed, d.Class)
	assert.Equal(t, file+":2", d.Declaration.Source)
}

func TestBadKernelDeclarationsNameWhatIsWrong(t *testing.T) {
	for in, want := range map[string]string{
		"safe 6.8.0-*":      `class "safe"`,
		"fixed":             "want CLASS PATTERN",
		"fixed 6.8.[":       "syntax error in pattern",
		"fixed=":            "empty pattern",
		"fixed 6.8 6.9":     "want CLASS PATTERN",
		"unaffected=6.1.0*": `class "unaffected"`,
	} {
		_, err := parseDeclaration(in)
		require.ErrorIs(t, err, errKernelDeclaration, in)
		assert.ErrorContains(t, err, want, in)
	}
	_, err := parseDeclarations(strings.NewReader("fixed 6.8.0-*\n\nfixd 6.9.*\n"), "kernels")
	assert.ErrorContains(t, err, "kernels:3: ")
	assert.ErrorContains(t, err, `class "fixd"`)

	var ds KernelDeclarations
	assert.ErrorIs(t, ds.Set("@"+filepath.Join(t.TempDir(), "missing")), os.ErrNotExist)
	assert.Empty(t, ds)
	_, err = New(nil, Config{Kernels: KernelDeclarations{KernelDeclaration{Pattern: "[", Class: KernelFixed}}})
	assert.ErrorContains(t, err, "Config.Kernels[0]")
}

func TestEmptyDeclarationsFileDeclaresNothing(t *testing.T) {
	ds, err := parseDeclarations(io.MultiReader(strings.NewReader("# nothing yet\n")), "kernels")
	require.NoError(t, err)
	assert.Empty(t, ds)
	var nilDs *KernelDeclarations
	assert.Equal(t, "", nilDs.String())
}
