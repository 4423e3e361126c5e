package ublk

import (
	"path"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/kernelrel"
)

// classify is decideKernel with patterns declared fixed.
func classify(release string, fixed ...string) (KernelClass, error) {
	decls := make([]KernelDeclaration, len(fixed))
	for i, p := range fixed {
		decls[i] = KernelDeclaration{Pattern: p, Class: KernelFixed}
	}
	d, err := decideKernel(release, decls...)
	return d.Class, err
}

func TestClassifyKernelTable(t *testing.T) {
	cases := []struct {
		release string
		allow   []string
		want    KernelClass
	}{
		{"6.14.6", nil, KernelExitMayHang}, // fix f40139fde527 without dd24f87f65c9
		{"6.14.7", nil, KernelExitMayHang},
		{"6.14.8", nil, KernelFixed},
		{"6.14.5", nil, KernelVulnerable},
		{"6.14.0-rc3", nil, KernelVulnerable},
		{"6.15.0-rc7", nil, KernelFixed},
		{"6.15-rc7", nil, KernelFixed},
		{"6.15.0-rc6", nil, KernelExitMayHang},
		{"6.15.0-rc4", nil, KernelExitMayHang},
		{"6.15.0-rc3", nil, KernelVulnerable},
		{"6.15", nil, KernelFixed},
		{"6.7.0", nil, KernelVulnerable},
		{"6.7.0-rc1", nil, KernelVulnerable},
		{"6.6.58", nil, KernelUnaffected},
		{"7.0", nil, KernelFixed},
		{"7.0.0-rc1", nil, KernelFixed},
		// Distribution and vendor builds: the numbers say neither which
		// fixes were backported nor whether ublk itself was.
		{"6.8.0-45-generic", nil, KernelVulnerable},             // Ubuntu 24.04 GA
		{"6.1.0-27-amd64", nil, KernelVulnerable},               // Debian 12
		{"5.14.0-427.13.1.el9_4.x86_64", nil, KernelVulnerable}, // RHEL 9 backports ublk
		{"5.15.0-122-generic", nil, KernelVulnerable},
		{"6.6.0-1-lts", nil, KernelVulnerable},
		{"6.14.12-arch1-1", nil, KernelVulnerable},
		{"6.12.48+deb13-cloud-amd64", nil, KernelVulnerable},
		{"6.18.44-fc-v782", nil, KernelVulnerable},
		{"6.10.14-linuxkit", nil, KernelVulnerable},
		{"6.15.0-rc7-00012-g34afb82a3c67", nil, KernelVulnerable}, // a git build past rc7
		{"6.15.0+", nil, KernelVulnerable},                        // a modified tree
		// Declared.
		{"6.8.0-88-generic", []string{"6.8.0-8[0-9]-generic"}, KernelFixed},
		{"6.8.0-45-generic", []string{"6.8.0-8[0-9]-generic"}, KernelVulnerable},
		{"6.12.48+deb13-cloud-amd64", []string{"6.12.*+deb13-*"}, KernelFixed},
		{"6.1.0-27-amd64", []string{"*"}, KernelFixed},
		{"custom-kernel", []string{"custom-*"}, KernelFixed},
	}
	for _, c := range cases {
		t.Run(c.release, func(t *testing.T) {
			got, err := classify(c.release, c.allow...)
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
		})
	}
}

func TestDecideKernelNamesTheRuleAndTheRelease(t *testing.T) {
	noble := []KernelDeclaration{
		{Pattern: "6.8.0-1[0-9][0-9]-generic", Class: KernelFixed, Source: "kernels:2"},
		{Pattern: "6.8.0-*-generic", Class: KernelVulnerable, Source: "kernels:3"},
	}
	cases := []struct {
		release string
		decls   []KernelDeclaration
		class   KernelClass
		rule    string
		source  string
	}{
		{"6.8.0-101-generic", noble, KernelFixed, "declared", "kernels:2"},
		{"6.8.0-45-generic", noble, KernelVulnerable, "declared", "kernels:3"},
		{"6.8.0-45-lowlatency", noble, KernelVulnerable, "vendor_build", ""},
		{"6.14.6", nil, KernelExitMayHang, "exit_may_hang", ""},
		{"6.15.0-rc5", nil, KernelExitMayHang, "exit_may_hang", ""},
		{"6.14.9", nil, KernelFixed, "fixed", ""},
		{"6.12.30", nil, KernelVulnerable, "race", ""},
		{"6.6.1", nil, KernelUnaffected, "before_bug", ""},
		// A declaration can say what the table cannot: a kernel.org 6.14.7
		// patched locally, or a table entry the operator distrusts.
		{"6.14.7", []KernelDeclaration{{Pattern: "6.14.7", Class: KernelFixed}}, KernelFixed, "declared", ""},
		{"6.16.1", []KernelDeclaration{{Pattern: "6.16.*", Class: KernelExitMayHang}}, KernelExitMayHang, "declared", ""},
	}
	for _, c := range cases {
		t.Run(c.release, func(t *testing.T) {
			d, err := decideKernel(c.release, c.decls...)
			require.NoError(t, err)
			assert.Equal(t, c.class, d.Class)
			assert.Equal(t, c.rule, d.Rule)
			assert.Equal(t, c.release, d.Release)
			if c.rule == "declared" {
				require.NotNil(t, d.Declaration)
				assert.Equal(t, c.source, d.Declaration.Source)
			} else {
				assert.Nil(t, d.Declaration)
			}
			assert.Contains(t, d.String(), c.release)
			assert.Contains(t, d.String(), c.rule)
			assert.NotEmpty(t, d.Detail, "the rule in words")
		})
	}
	d, err := decideKernel("linux")
	require.ErrorIs(t, err, kernelrel.ErrRelease)
	assert.Equal(t, "unparseable", d.Rule)
	assert.Equal(t, KernelVulnerable, d.Class)
}

func TestExitMayHangIsPlannedLikeVulnerable(t *testing.T) {
	assert.False(t, KernelExitMayHang.MayKillWithLiveDevices())
}

func TestClassifyKernelRejectsBadPattern(t *testing.T) {
	_, err := classify("6.8.0-45-generic", "6.8.[")
	assert.ErrorIs(t, err, path.ErrBadPattern)
}

func TestKernelClassKillRule(t *testing.T) {
	assert.False(t, KernelVulnerable.MayKillWithLiveDevices())
	assert.True(t, KernelFixed.MayKillWithLiveDevices())
	assert.True(t, KernelUnaffected.MayKillWithLiveDevices())
}

// The classes are kernelrel's words: Classify's answer is converted, not
// translated.
func TestKernelClassesAreKernelrelWords(t *testing.T) {
	assert.Equal(t, []string{kernelrel.Unaffected, kernelrel.Vulnerable, kernelrel.ExitMayHang, kernelrel.Fixed},
		[]string{string(KernelUnaffected), string(KernelVulnerable), string(KernelExitMayHang), string(KernelFixed)})
}
