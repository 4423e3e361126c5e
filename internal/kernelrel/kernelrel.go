package kernelrel

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// The classes, as ublk.KernelClass spells them.
const (
	// Unaffected: a kernel.org release older than 6.7.
	Unaffected = "unaffected"
	// Vulnerable: the race without its fix, a vendor build, or an
	// unparseable release.
	Vulnerable = "vulnerable"
	// ExitMayHang: the fix without its follow-up dd24f87f65c9.
	ExitMayHang = "exit_may_hang"
	// Fixed: both fixes.
	Fixed = "fixed"
)

// The rules of the table, in the order Classify tries them, as the
// identifiers of ublk.KernelDecision.Rule.
const (
	// RuleUnparseable: the release does not start with MAJOR.MINOR.
	RuleUnparseable = "unparseable"
	// RuleVendorBuild: not a kernel.org release string
	// (MAJOR.MINOR[.PATCH][-rcN]); its numbers do not say which fixes a
	// distribution or vendor carried, in either direction.
	RuleVendorBuild = "vendor_build"
	// RuleBeforeBug: a kernel.org release older than 6.7.
	RuleBeforeBug = "before_bug"
	// RuleRace: a kernel.org release with the race and without the fix.
	RuleRace = "race"
	// RuleExitMayHang: a kernel.org release with the fix but without
	// dd24f87f65c9.
	RuleExitMayHang = "exit_may_hang"
	// RuleFixed: a kernel.org release with both fixes.
	RuleFixed = "fixed"
)

// Detail says in words what rule means, for the Report beside the
// identifier; "" for a rule it does not know.
func Detail(rule string) string {
	return map[string]string{
		RuleUnparseable: "unparseable release: treated as vulnerable",
		RuleVendorBuild: "vendor build, not declared: treated as vulnerable",
		RuleBeforeBug:   "kernel.org release before 6.7: the race does not exist",
		RuleRace:        "kernel.org release with the race and without fix f40139fde527",
		RuleExitMayHang: "kernel.org release with fix f40139fde527 but without dd24f87f65c9: a server exit may hang",
		RuleFixed:       "kernel.org release with fixes f40139fde527 and dd24f87f65c9",
	}[rule]
}

// Version is the numeric part of a kernel release string.
type Version struct {
	Major, Minor, Patch int
	// RC is the release candidate number (6.15.0-rc7 has RC 7), 0 for a
	// release.
	RC int
}

// String formats v as the kernel does: "6.14.6" or "6.15.0-rc7".
func (v Version) String() string {
	s := fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch)
	if v.RC > 0 {
		s += fmt.Sprintf("-rc%d", v.RC)
	}
	return s
}

func (v Version) less(major, minor, patch int) bool {
	if v.Major != major {
		return v.Major < major
	}
	if v.Minor != minor {
		return v.Minor < minor
	}
	return v.Patch < patch
}

// ErrRelease is wrapped by errors about release strings that do not start
// with MAJOR.MINOR.
var ErrRelease = errors.New("ublk: unrecognised kernel release")

// Parse reads the version at the start of a release string as uname -r
// prints it: "6.8.0-45-generic", "6.1.0-27-amd64", "6.14.6", "6.15.0-rc7",
// "6.12.48+deb13-cloud-amd64", "7.0". Everything after the numbers is a
// vendor suffix and ignored, except a "-rcN" right after them.
func Parse(release string) (Version, error) {
	var v Version
	nums, rest := leadingVersion(strings.TrimSpace(release))
	if len(nums) < 2 {
		return v, fmt.Errorf("%w %q: want MAJOR.MINOR[.PATCH][suffix]", ErrRelease, release)
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

// upstream is the form of a kernel.org release's uname -r: no local
// version, no vendor suffix.
var upstream = regexp.MustCompile(`^[0-9]+\.[0-9]+(\.[0-9]+)?(-rc[0-9]+)?$`)

// Upstream reports whether release (trimmed) is a kernel.org release
// string, MAJOR.MINOR[.PATCH][-rcN].
func Upstream(release string) bool { return upstream.MatchString(strings.TrimSpace(release)) }

// Classify judges a release string by the first rule that applies:
//
//  1. RuleUnparseable: Vulnerable, with an error wrapping ErrRelease.
//  2. RuleVendorBuild: a release that is not exactly MAJOR.MINOR[.PATCH]
//     or MAJOR.MINOR[.PATCH]-rcN ("6.8.0-45-generic",
//     "5.14.0-427.13.1.el9_4.x86_64", "6.12.48+deb13-cloud-amd64") is
//     Vulnerable: vendors backport ublk into older bases and fixes into
//     theirs, and the numbers tell neither.
//  3. For kernel.org releases, the history (ClassifyVersion).
func Classify(release string) (class, rule string, err error) {
	v, err := Parse(release)
	if err != nil {
		return Vulnerable, RuleUnparseable, err
	}
	if !Upstream(release) {
		return Vulnerable, RuleVendorBuild, nil
	}
	class, rule = ClassifyVersion(v)
	return class, rule, nil
}

// ClassifyVersion is the kernel.org history of the bug and its two fixes:
// before 6.7 Unaffected; 6.7-6.14.5, 6.14-rcN and 6.15-rc1..rc3
// Vulnerable; 6.14.6-6.14.7 and 6.15-rc4..rc6 ExitMayHang; 6.14.8 and
// later 6.14.y, 6.15-rc7 and later Fixed.
func ClassifyVersion(v Version) (class, rule string) {
	switch {
	case v.less(6, 7, 0):
		return Unaffected, RuleBeforeBug
	case v.Major == 6 && v.Minor == 14:
		switch {
		case v.RC > 0 || v.Patch < 6:
			return Vulnerable, RuleRace
		case v.Patch < 8:
			return ExitMayHang, RuleExitMayHang
		}
		return Fixed, RuleFixed
	case v.Major == 6 && v.Minor == 15 && v.Patch == 0 && v.RC > 0:
		// f40139fde527 was merged before 6.15-rc4, dd24f87f65c9 in rc7.
		switch {
		case v.RC < 4:
			return Vulnerable, RuleRace
		case v.RC < 7:
			return ExitMayHang, RuleExitMayHang
		}
		return Fixed, RuleFixed
	case v.less(6, 15, 0):
		return Vulnerable, RuleRace
	}
	return Fixed, RuleFixed
}

// DelDevWaitsLocked reports whether release may be a ublk driver whose
// DEL_DEV waits for the device's last reference with wait_event while it
// holds the driver's global ublk_ctl_mutex: 5.19 (the driver's first) to
// 6.2. 0abe39dec065 ("block: ublk: improve handling device deletion",
// 6.3-rc1) releases the lock before the wait and makes it interruptible.
// There a DEL_DEV of a device whose disk is still open (a VMM's fd) puts
// the sender's thread in D state until the opener closes: no cancel or
// signal ends it, every control command on the node queues behind the
// lock, and the process cannot finish exiting. A vendor build is judged
// by its base version (vendors backport the driver forward, never back
// out its fixes); an unparseable release waits locked, to be safe.
func DelDevWaitsLocked(release string) bool {
	v, err := Parse(release)
	return err != nil || v.less(6, 3, 0)
}
