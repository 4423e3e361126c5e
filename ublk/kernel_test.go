package ublk

import (
	"fmt"
	"path"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
			got, err := ClassifyKernel(c.release, c.allow...)
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
		rule    KernelRule
		source  string
	}{
		{"6.8.0-101-generic", noble, KernelFixed, RuleDeclared, "kernels:2"},
		{"6.8.0-45-generic", noble, KernelVulnerable, RuleDeclared, "kernels:3"},
		{"6.8.0-45-lowlatency", noble, KernelVulnerable, RuleVendorBuild, ""},
		{"6.14.6", nil, KernelExitMayHang, RuleExitMayHang, ""},
		{"6.15.0-rc5", nil, KernelExitMayHang, RuleExitMayHang, ""},
		{"6.14.9", nil, KernelFixed, RuleFixed, ""},
		{"6.12.30", nil, KernelVulnerable, RuleRace, ""},
		{"6.6.1", nil, KernelUnaffected, RuleBeforeBug, ""},
		// A declaration can say what the table cannot: a kernel.org 6.14.7
		// patched locally, or a table entry the operator distrusts.
		{"6.14.7", []KernelDeclaration{{Pattern: "6.14.7", Class: KernelFixed}}, KernelFixed, RuleDeclared, ""},
		{"6.16.1", []KernelDeclaration{{Pattern: "6.16.*", Class: KernelExitMayHang}}, KernelExitMayHang, RuleDeclared, ""},
	}
	for _, c := range cases {
		t.Run(c.release, func(t *testing.T) {
			d, err := DecideKernel(c.release, c.decls...)
			require.NoError(t, err)
			assert.Equal(t, c.class, d.Class)
			assert.Equal(t, c.rule, d.Rule)
			assert.Equal(t, c.release, d.Release)
			if c.rule == RuleDeclared {
				require.NotNil(t, d.Declaration)
				assert.Equal(t, c.source, d.Declaration.Source)
			} else {
				assert.Nil(t, d.Declaration)
			}
			assert.Contains(t, d.String(), c.release)
			assert.Contains(t, d.String(), string(c.rule))
		})
	}
	d, err := DecideKernel("linux")
	require.ErrorIs(t, err, ErrKernelRelease)
	assert.Equal(t, RuleUnparseable, d.Rule)
	assert.Equal(t, KernelVulnerable, d.Class)
}

func TestExitMayHangIsPlannedLikeVulnerable(t *testing.T) {
	assert.False(t, KernelExitMayHang.MayKillWithLiveDevices())
}

func TestUnparseableReleaseIsVulnerableWithError(t *testing.T) {
	for _, r := range []string{"", "linux", "6", "6.", "v6.8.0", "6.x.1", "1234567.1"} {
		got, err := ClassifyKernel(r)
		assert.ErrorIs(t, err, ErrKernelRelease, r)
		assert.Equal(t, KernelVulnerable, got, r)
	}
}

func TestClassifyKernelRejectsBadPattern(t *testing.T) {
	_, err := ClassifyKernel("6.8.0-45-generic", "6.8.[")
	assert.ErrorIs(t, err, path.ErrBadPattern)
}

func TestParseKernelRelease(t *testing.T) {
	cases := map[string]KernelVersion{
		"6.8.0-45-generic":          {6, 8, 0, 0},
		"6.15.0-rc7":                {6, 15, 0, 7},
		"6.15-rc7":                  {6, 15, 0, 7},
		"6.12.48+deb13-cloud-amd64": {6, 12, 48, 0},
		"7.0":                       {7, 0, 0, 0},
		" 6.14.6\n":                 {6, 14, 6, 0},
		"6.8.foo":                   {6, 8, 0, 0},
		"4.19.0.1":                  {4, 19, 0, 0},
	}
	for in, want := range cases {
		got, err := ParseKernelRelease(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
}

func TestKernelClassKillRule(t *testing.T) {
	assert.False(t, KernelVulnerable.MayKillWithLiveDevices())
	assert.True(t, KernelFixed.MayKillWithLiveDevices())
	assert.True(t, KernelUnaffected.MayKillWithLiveDevices())
}

// FuzzParseKernelRelease checks that the parser never panics, that what it
// accepts begins with the numbers it returns, that the canonical form
// parses back to the same version, and that classification never calls an
// unparseable or vendor release safe.
func FuzzParseKernelRelease(f *testing.F) {
	for _, s := range []string{"6.8.0-45-generic", "6.15.0-rc7", "7.0", "6.12.48+deb13-cloud-amd64", "", "6..8"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseKernelRelease(s)
		class, cerr := ClassifyKernel(s)
		if err != nil {
			if cerr == nil || class != KernelVulnerable {
				t.Fatalf("unparseable %q classified %v, %v", s, class, cerr)
			}
			return
		}
		if cerr != nil {
			t.Fatalf("parseable %q: classify error %v", s, cerr)
		}
		if v.Major < 0 || v.Minor < 0 || v.Patch < 0 || v.RC < 0 {
			t.Fatalf("negative field in %+v from %q", v, s)
		}
		back, err := ParseKernelRelease(v.String())
		if err != nil || back != v {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", s, v, v.String(), back, err)
		}
		if !upstreamRelease.MatchString(strings.TrimSpace(s)) {
			if class != KernelVulnerable {
				t.Fatalf("vendor release %q classified %v", s, class)
			}
			return
		}
		if got, _ := classifyVersion(back); got != class {
			t.Fatalf("%q classified %v, canonical %q classified %v", s, class, v.String(), got)
		}
		_ = fmt.Sprint(v)
	})
}
