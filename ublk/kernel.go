package ublk

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
)

// KernelClass says whether a kernel has the ublk cancel race that can crash
// the host when a ublk server dies with live devices and I/O in flight
// (kernel fix f40139fde527, CVE-2025-37906), and whether a server exit can
// hang on it.
type KernelClass string

const (
	// KernelUnaffected: a kernel.org release older than 6.7, where the race
	// was not yet introduced (216c8f5ef0f2 came with 6.7). A vendor build
	// of an older base is not unaffected: enterprise kernels (RHEL 9's
	// 5.14.0-*) backport ublk wholesale.
	KernelUnaffected KernelClass = "unaffected"
	// KernelVulnerable: 6.7 up to 6.14.5 and 6.15-rc1..rc3, every release
	// string that is not a kernel.org release (a distribution or vendor
	// build) unless declared, and every unparseable release. Killing the
	// daemon while a device is live can crash the host.
	KernelVulnerable KernelClass = "vulnerable"
	// KernelExitMayHang: 6.14.6-6.14.7 and 6.15-rc4..rc6 carry the fix but
	// not its follow-up dd24f87f65c9, so a server exit with live devices
	// can spin in the cancel path. Planned like KernelVulnerable: the
	// daemon is never killed with a live device.
	KernelExitMayHang KernelClass = "exit may hang"
	// KernelFixed: 6.15 and later, 6.14.8 and later 6.14.y, or a release
	// the operator declared fixed.
	KernelFixed KernelClass = "fixed"
)

// MayKillWithLiveDevices reports whether the daemon may be killed while a
// device still has its disk: only on unaffected and fixed kernels.
func (c KernelClass) MayKillWithLiveDevices() bool { return c == KernelUnaffected || c == KernelFixed }

// KernelRule names the rule of the kernel table that decided a class.
type KernelRule string

// The rules, in the order DecideKernel tries them.
const (
	// RuleDeclared: an operator declaration matched the release.
	RuleDeclared KernelRule = "declared"
	// RuleUnparseable: the release does not start with MAJOR.MINOR.
	RuleUnparseable KernelRule = "unparseable release"
	// RuleVendorBuild: the release is not a kernel.org release string
	// (MAJOR.MINOR[.PATCH][-rcN]); its numbers do not say which fixes a
	// distribution or vendor carried, in either direction.
	RuleVendorBuild KernelRule = "vendor build, not declared"
	// RuleBeforeBug: a kernel.org release older than 6.7.
	RuleBeforeBug KernelRule = "before 6.7"
	// RuleRace: a kernel.org release with the race and without the fix.
	RuleRace KernelRule = "race without fix f40139fde527"
	// RuleExitMayHang: a kernel.org release with the fix but without
	// dd24f87f65c9.
	RuleExitMayHang KernelRule = "fix without dd24f87f65c9"
	// RuleFixed: a kernel.org release with both fixes.
	RuleFixed KernelRule = "fixed upstream"
)

// KernelDecision is a classified release and the rule that decided it.
type KernelDecision struct {
	Release string      `json:"release"`
	Class   KernelClass `json:"class"`
	Rule    KernelRule  `json:"rule"`
	// Declaration is the operator declaration that matched, for
	// RuleDeclared.
	Declaration *KernelDeclaration `json:"declaration,omitempty"`
}

// String says in one line what was decided, by which rule and from which
// release string, for logs and the Report.
func (d KernelDecision) String() string {
	s := fmt.Sprintf("kernel %q: %s (%s)", d.Release, d.Class, d.Rule)
	if d.Declaration != nil {
		s += ": " + d.Declaration.String()
	}
	return s
}

// KernelVersion is the numeric part of a kernel release string.
type KernelVersion struct {
	Major, Minor, Patch int
	// RC is the release candidate number (6.15.0-rc7 has RC 7), 0 for a
	// release.
	RC int
}

// String formats v as the kernel does: "6.14.6" or "6.15.0-rc7".
func (v KernelVersion) String() string {
	s := fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch)
	if v.RC > 0 {
		s += fmt.Sprintf("-rc%d", v.RC)
	}
	return s
}

func (v KernelVersion) less(major, minor, patch int) bool {
	if v.Major != major {
		return v.Major < major
	}
	if v.Minor != minor {
		return v.Minor < minor
	}
	return v.Patch < patch
}

// ErrKernelRelease is wrapped by errors about release strings that do not
// start with MAJOR.MINOR.
var ErrKernelRelease = errors.New("ublk: unrecognised kernel release")

// ParseKernelRelease reads the version at the start of a release string as
// uname -r prints it: "6.8.0-45-generic", "6.1.0-27-amd64", "6.14.6",
// "6.15.0-rc7", "6.12.48+deb13-cloud-amd64", "7.0". Everything after the
// numbers is a vendor suffix and ignored, except a "-rcN" right after them.
func ParseKernelRelease(release string) (KernelVersion, error) {
	var v KernelVersion
	nums, rest := leadingVersion(strings.TrimSpace(release))
	if len(nums) < 2 {
		return v, fmt.Errorf("%w %q: want MAJOR.MINOR[.PATCH][suffix]", ErrKernelRelease, release)
	}
	v.Major, v.Minor = nums[0], nums[1]
	if len(nums) > 2 {
		v.Patch = nums[2]
	}
	if after, ok := strings.CutPrefix(rest, "-rc"); ok {
		n, _ := leadingInt(after)
		v.RC = max(n, 0)
	}
	return v, nil
}

// leadingVersion parses up to three dot-separated numbers.
func leadingVersion(s string) ([]int, string) {
	var nums []int
	for len(nums) < 3 {
		n, rest := leadingInt(s)
		if n < 0 {
			break
		}
		nums, s = append(nums, n), rest
		if len(nums) == 3 || !strings.HasPrefix(s, ".") {
			break
		}
		if m, _ := leadingInt(s[1:]); m < 0 {
			break // "6.8.foo": the dot belongs to the suffix
		}
		s = s[1:]
	}
	return nums, s
}

// leadingInt parses a decimal of at most 6 digits, -1 if there is none.
func leadingInt(s string) (int, string) {
	i := 0
	for i < len(s) && i < 7 && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 || i > 6 {
		return -1, s
	}
	n, _ := strconv.Atoi(s[:i])
	return n, s[i:]
}

// ClassifyKernel classifies a release string. allow lists kernels known to
// carry fixes f40139fde527 and dd24f87f65c9, as path.Match patterns over
// the whole release (for example "6.8.0-8[0-9]-generic" or
// "6.12.*+deb13-*"): each is a declaration of KernelFixed, see
// DecideKernel. An unparseable release that no pattern matches is
// KernelVulnerable with an error wrapping ErrKernelRelease; a malformed
// pattern returns path.ErrBadPattern.
func ClassifyKernel(release string, allow ...string) (KernelClass, error) {
	decls := make([]KernelDeclaration, len(allow))
	for i, p := range allow {
		decls[i] = KernelDeclaration{Pattern: p, Class: KernelFixed}
	}
	d, err := DecideKernel(release, decls...)
	return d.Class, err
}

// DecideKernel classifies a release string by the first rule that applies:
//
//  1. RuleDeclared: the first declaration whose pattern matches the whole
//     (trimmed) release decides, whatever the release.
//  2. RuleUnparseable: KernelVulnerable, with an error wrapping
//     ErrKernelRelease.
//  3. RuleVendorBuild: a release that is not exactly MAJOR.MINOR[.PATCH]
//     or MAJOR.MINOR[.PATCH]-rcN ("6.8.0-45-generic",
//     "5.14.0-427.13.1.el9_4.x86_64", "6.12.48+deb13-cloud-amd64") is
//     KernelVulnerable: vendors backport ublk into older bases and fixes
//     into theirs, and the numbers tell neither.
//  4. For kernel.org releases, the history: before 6.7 KernelUnaffected;
//     6.7-6.14.5, 6.14-rcN and 6.15-rc1..rc3 KernelVulnerable;
//     6.14.6-6.14.7 and 6.15-rc4..rc6 KernelExitMayHang; 6.14.8 and later
//     6.14.y, 6.15-rc7 and later KernelFixed.
//
// A malformed declaration pattern returns path.ErrBadPattern (New rejects
// them earlier).
func DecideKernel(release string, decls ...KernelDeclaration) (KernelDecision, error) {
	rel := strings.TrimSpace(release)
	d := KernelDecision{Release: release, Class: KernelVulnerable}
	for i := range decls {
		ok, err := path.Match(decls[i].Pattern, rel)
		if err != nil {
			return d, fmt.Errorf("ublk: kernel declaration %s: %w", decls[i], err)
		}
		if ok {
			decl := decls[i]
			d.Class, d.Rule, d.Declaration = decl.Class, RuleDeclared, &decl
			return d, nil
		}
	}
	v, err := ParseKernelRelease(rel)
	if err != nil {
		d.Rule = RuleUnparseable
		return d, err
	}
	if !upstreamRelease.MatchString(rel) {
		d.Rule = RuleVendorBuild
		return d, nil
	}
	d.Class, d.Rule = classifyVersion(v)
	return d, nil
}

// upstreamRelease is the form of a kernel.org release's uname -r: no local
// version, no vendor suffix.
var upstreamRelease = regexp.MustCompile(`^[0-9]+\.[0-9]+(\.[0-9]+)?(-rc[0-9]+)?$`)

// classifyVersion is the kernel.org history of the bug and its two fixes.
func classifyVersion(v KernelVersion) (KernelClass, KernelRule) {
	switch {
	case v.less(6, 7, 0):
		return KernelUnaffected, RuleBeforeBug
	case v.Major == 6 && v.Minor == 14:
		switch {
		case v.RC > 0 || v.Patch < 6:
			return KernelVulnerable, RuleRace
		case v.Patch < 8:
			return KernelExitMayHang, RuleExitMayHang
		}
		return KernelFixed, RuleFixed
	case v.Major == 6 && v.Minor == 15 && v.Patch == 0 && v.RC > 0:
		// f40139fde527 was merged before 6.15-rc4, dd24f87f65c9 in rc7.
		switch {
		case v.RC < 4:
			return KernelVulnerable, RuleRace
		case v.RC < 7:
			return KernelExitMayHang, RuleExitMayHang
		}
		return KernelFixed, RuleFixed
	case v.less(6, 15, 0):
		return KernelVulnerable, RuleRace
	}
	return KernelFixed, RuleFixed
}
