package kernelrel_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/kernelrel"
)

func TestParse(t *testing.T) {
	cases := map[string]kernelrel.Version{
		"6.8.0-45-generic":          {Major: 6, Minor: 8},
		"6.15.0-rc7":                {Major: 6, Minor: 15, RC: 7},
		"6.15-rc7":                  {Major: 6, Minor: 15, RC: 7},
		"6.12.48+deb13-cloud-amd64": {Major: 6, Minor: 12, Patch: 48},
		"7.0":                       {Major: 7},
		" 6.14.6\n":                 {Major: 6, Minor: 14, Patch: 6},
		"6.8.foo":                   {Major: 6, Minor: 8},
		"4.19.0.1":                  {Major: 4, Minor: 19},
	}
	for in, want := range cases {
		got, err := kernelrel.Parse(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
}

func TestUnparseableReleaseIsVulnerableWithError(t *testing.T) {
	for _, r := range []string{"", "linux", "6", "6.", "v6.8.0", "6.x.1", "1234567.1"} {
		class, rule, err := kernelrel.Classify(r)
		assert.ErrorIs(t, err, kernelrel.ErrRelease, r)
		assert.Equal(t, kernelrel.Vulnerable, class, r)
		assert.Equal(t, kernelrel.RuleUnparseable, rule, r)
	}
}

// Every rule has its sentence, and the identifiers are snake_case.
func TestRulesAreIdentifiersWithDetail(t *testing.T) {
	for _, rule := range []string{kernelrel.RuleUnparseable, kernelrel.RuleVendorBuild, kernelrel.RuleBeforeBug,
		kernelrel.RuleRace, kernelrel.RuleExitMayHang, kernelrel.RuleFixed} {
		assert.Regexp(t, `^[a-z]+(_[a-z]+)*$`, rule)
		assert.NotEmpty(t, kernelrel.Detail(rule), rule)
	}
	assert.Empty(t, kernelrel.Detail("no such rule"))
}

// FuzzParse checks that the parser never panics, that the canonical form
// parses back to the same version, and that classification never calls an
// unparseable or vendor release safe.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"6.8.0-45-generic", "6.15.0-rc7", "7.0", "6.12.48+deb13-cloud-amd64", "", "6..8"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := kernelrel.Parse(s)
		class, _, cerr := kernelrel.Classify(s)
		if err != nil {
			if cerr == nil || class != kernelrel.Vulnerable {
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
		back, err := kernelrel.Parse(v.String())
		if err != nil || back != v {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", s, v, v.String(), back, err)
		}
		if !kernelrel.Upstream(s) {
			if class != kernelrel.Vulnerable {
				t.Fatalf("vendor release %q classified %v", s, class)
			}
			return
		}
		if got, _ := kernelrel.ClassifyVersion(back); got != class {
			t.Fatalf("%q classified %v, canonical %q classified %v", s, class, v.String(), got)
		}
	})
}

// DEL_DEV waits under ublk_ctl_mutex from the driver's first release to
// 6.2; 0abe39dec065 (6.3-rc1) waits after the unlock, interruptibly.
func TestDelDevWaitsLockedBefore63(t *testing.T) {
	for release, want := range map[string]bool{
		"5.19": true, "6.0.9": true, "6.1.10": true, "6.1.0-27-amd64": true, "6.2.16": true,
		"5.14.0-427.13.1.el9_4.x86_64": true, "not a release": true,
		"6.3-rc1": false, "6.3.0": false, "6.8.0-45-generic": false, "6.12.118+deb12-cloud-amd64": false, "6.18.44-fc-v1300": false,
	} {
		if got := kernelrel.DelDevWaitsLocked(release); got != want {
			t.Errorf("DelDevWaitsLocked(%q) = %v, want %v", release, got, want)
		}
	}
}
