// Package kernelrel reads a kernel release string (uname -r) and judges it
// by the kernel.org history of the ublk cancel race (introduced by
// 216c8f5ef0f2 in 6.7, fixed by f40139fde527, CVE-2025-37906, with the
// follow-up dd24f87f65c9): Classify returns the class and the rule that
// decided it, as identifiers. Package ublk tries the operator's
// declarations first and reports the result in its Report.
package kernelrel
