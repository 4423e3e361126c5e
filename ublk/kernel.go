package ublk

import (
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
)

// KernelClass says whether a kernel has the ublk cancel race that can crash
// the host when a ublk server dies with live devices and I/O in flight
// (kernel fix f40139fde527, CVE-2025-37906).
type KernelClass string

const (
	// KernelUnaffected: older than 6.7, where the race was not yet
	// introduced.
	KernelUnaffected KernelClass = "unaffected"
	// KernelVulnerable: 6.7 up to 6.14.5, and 6.15-rc1..rc4, without a
	// vendor backport. Killing the daemon while a device is live can crash
	// the host. Unparseable releases are treated as vulnerable.
	KernelVulnerable KernelClass = "vulnerable"
	// KernelFixed: 6.15 and later, 6.14.6 and later 6.14.y, or a release
	// matched by the user's allow-list of vendor kernels carrying the fix.
	KernelFixed KernelClass = "fixed"
)

// MayKillWithLiveDevices reports whether the daemon may be killed while a
// device still has its disk.
func (c KernelClass) MayKillWithLiveDevices() bool { return c == KernelUnaffected || c == KernelFixed }

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

// ClassifyKernel classifies a release string. allow lists vendor kernels
// known to carry fix f40139fde527, as path.Match patterns over the whole
// release (for example "6.8.0-6[0-9]-generic" or "6.12.*+deb13-*"); a match
// makes an otherwise vulnerable kernel KernelFixed. An unparseable release
// that no pattern matches is KernelVulnerable with an error wrapping
// ErrKernelRelease; a malformed pattern returns path.ErrBadPattern.
func ClassifyKernel(release string, allow ...string) (KernelClass, error) {
	v, perr := ParseKernelRelease(release)
	if perr == nil && v.less(6, 7, 0) {
		return KernelUnaffected, nil
	}
	for _, p := range allow {
		ok, err := path.Match(p, strings.TrimSpace(release))
		if err != nil {
			return KernelVulnerable, fmt.Errorf("ublk: allow pattern %q: %w", p, err)
		}
		if ok {
			return KernelFixed, nil
		}
	}
	if perr != nil {
		return KernelVulnerable, perr
	}
	return classifyVersion(v), nil
}

func classifyVersion(v KernelVersion) KernelClass {
	switch {
	case v.less(6, 7, 0):
		return KernelUnaffected
	case v.Major == 6 && v.Minor == 14:
		if v.RC == 0 && v.Patch >= 6 {
			return KernelFixed
		}
		return KernelVulnerable
	case v.Major == 6 && v.Minor == 15 && v.Patch == 0 && v.RC > 0 && v.RC < 5:
		// The fix was merged during the 6.15 release candidates; treat the
		// early ones as not having it.
		return KernelVulnerable
	case v.less(6, 15, 0):
		return KernelVulnerable
	default:
		return KernelFixed
	}
}

// validatePatterns checks allow-list patterns as ClassifyKernel uses them.
func validatePatterns(patterns []string) error {
	for _, p := range patterns {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("pattern %q: %w", p, err)
		}
	}
	return nil
}
