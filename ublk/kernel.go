package ublk

import (
	"fmt"
	"path"
	"strings"

	"github.com/drainkit/drainkit/internal/kernelrel"
)

// KernelClass says whether a kernel has the ublk cancel race that can crash
// the host when a ublk server dies with live devices and I/O in flight
// (kernel fix f40139fde527, CVE-2025-37906), and whether a server exit can
// hang on it. Its values are identifiers.
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
	KernelExitMayHang KernelClass = "exit_may_hang"
	// KernelFixed: 6.15 and later, 6.14.8 and later 6.14.y, or a release
	// the operator declared fixed.
	KernelFixed KernelClass = "fixed"
)

// MayKillWithLiveDevices reports whether the daemon may be killed while a
// device still has its disk: only on unaffected and fixed kernels.
func (c KernelClass) MayKillWithLiveDevices() bool { return c == KernelUnaffected || c == KernelFixed }

// ruleDeclared is KernelDecision.Rule when an operator declaration
// matched.
const ruleDeclared = "declared"

// KernelDecision is a classified release and the rule that decided it
// (Teardown.KernelDecision, Report.KernelDecision).
type KernelDecision struct {
	Release string      `json:"release"`
	Class   KernelClass `json:"class"`
	// Rule is the rule of the table that decided Class, an identifier, in
	// the order they are tried: "declared" (an operator declaration
	// matched), "unparseable" (the release does not start with
	// MAJOR.MINOR), "vendor_build" (not a kernel.org release string, so
	// its numbers say nothing of the fixes), and for kernel.org releases
	// "before_bug" (older than 6.7), "race" (without fix f40139fde527),
	// "exit_may_hang" (the fix without dd24f87f65c9) or "fixed".
	Rule string `json:"rule"`
	// Detail says the same in words.
	Detail string `json:"detail"`
	// Declaration is the operator declaration that matched, for the rule
	// "declared".
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

// decideKernel classifies a release string by the first rule that
// applies: the first declaration whose pattern matches the whole (trimmed)
// release decides ("declared"), whatever the release; otherwise the table
// of kernelrel.Classify. An unparseable release is KernelVulnerable with an
// error wrapping kernelrel.ErrRelease; a malformed declaration pattern
// returns path.ErrBadPattern (New rejects them earlier).
func decideKernel(release string, decls ...KernelDeclaration) (KernelDecision, error) {
	rel := strings.TrimSpace(release)
	d := KernelDecision{Release: release, Class: KernelVulnerable}
	for i := range decls {
		ok, err := path.Match(decls[i].Pattern, rel)
		if err != nil {
			return d, fmt.Errorf("ublk: kernel declaration %s: %w", decls[i], err)
		}
		if ok {
			decl := decls[i]
			d.Class, d.Rule, d.Declaration = decl.Class, ruleDeclared, &decl
			d.Detail = "declared " + declWord(decl.Class) + " by the operator"
			if decl.Source != "" {
				d.Detail += " (" + decl.Source + ")"
			}
			return d, nil
		}
	}
	class, rule, err := kernelrel.Classify(rel)
	d.Class, d.Rule, d.Detail = KernelClass(class), rule, kernelrel.Detail(rule)
	return d, err
}
