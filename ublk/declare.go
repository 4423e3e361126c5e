package ublk

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// KernelDeclaration is an operator's statement about the kernels a node
// runs: releases matching Pattern (path.Match over the whole uname -r) are
// of Class. Declarations are how a vendor kernel's backports become known:
// the step tries them before its own table (see KernelDecision).
//
// The documented example is Ubuntu 24.04 (noble): its 6.8 kernels read
// "6.8.0-NN-generic" whatever they carry, and the CVE-2025-37906 update
// brought both f40139fde527 and dd24f87f65c9 into them. A node pool that
// has verified the ABI numbers of that update and later (the USN for its
// flavour names them) declares them fixed and leaves the rest vulnerable:
//
//	# /etc/drainkit/kernels: first match wins
//	fixed       6.8.0-1[0-9][0-9]-generic   # ABIs we verified carry the fix
//	vulnerable  6.8.0-*-generic             # older noble kernels still around
//
// (the numbers above are the shape, not a statement about which ABI has
// the fix: take them from the USN).
type KernelDeclaration struct {
	// Pattern is a path.Match pattern over the whole release string.
	Pattern string `json:"pattern"`
	// Class is KernelFixed, KernelVulnerable or KernelExitMayHang.
	Class KernelClass `json:"class"`
	// Source says where the declaration came from ("/etc/drainkit/kernels:3",
	// "flag"), for the Report.
	Source string `json:"source,omitempty"`
}

// String formats d as a declaration line, with its source.
func (d KernelDeclaration) String() string {
	s := declWord(d.Class) + " " + d.Pattern
	if d.Source != "" {
		s += " (" + d.Source + ")"
	}
	return s
}

// errKernelDeclaration is wrapped by errors about malformed declarations.
var errKernelDeclaration = errors.New("ublk: bad kernel declaration")

// validate checks the class and the pattern.
func (d KernelDeclaration) validate() error {
	switch d.Class {
	case KernelFixed, KernelVulnerable, KernelExitMayHang:
	default:
		return fmt.Errorf("%w %q: class %q: want fixed, vulnerable or exit-may-hang", errKernelDeclaration, d.Pattern, d.Class)
	}
	if d.Pattern == "" {
		return fmt.Errorf("%w: empty pattern", errKernelDeclaration)
	}
	if _, err := path.Match(d.Pattern, ""); err != nil {
		return fmt.Errorf("%w %q: %w", errKernelDeclaration, d.Pattern, err)
	}
	return nil
}

// declWord is the class as written in a declaration.
func declWord(c KernelClass) string {
	if c == KernelExitMayHang {
		return "exit-may-hang"
	}
	return string(c)
}

// parseDeclaration reads one declaration, "CLASS PATTERN" or
// "CLASS=PATTERN" (the form for a command-line flag), where CLASS is
// fixed, vulnerable or exit-may-hang: "fixed=6.8.0-1[0-9][0-9]-generic".
func parseDeclaration(s string) (KernelDeclaration, error) {
	var d KernelDeclaration
	word, pattern, ok := strings.Cut(strings.TrimSpace(s), "=")
	if !ok {
		fields := strings.Fields(s)
		if len(fields) != 2 {
			return d, fmt.Errorf("%w %q: want CLASS PATTERN or CLASS=PATTERN", errKernelDeclaration, s)
		}
		word, pattern = fields[0], fields[1]
	}
	word, pattern = strings.TrimSpace(word), strings.TrimSpace(pattern)
	switch word {
	case "fixed":
		d.Class = KernelFixed
	case "vulnerable":
		d.Class = KernelVulnerable
	case "exit-may-hang", string(KernelExitMayHang):
		d.Class = KernelExitMayHang
	default:
		return d, fmt.Errorf("%w %q: class %q: want fixed, vulnerable or exit-may-hang", errKernelDeclaration, s, word)
	}
	d.Pattern = pattern
	return d, d.validate()
}

// parseDeclarations reads declarations one per line; blank lines and text
// after '#' are ignored. source names the input in errors and in each
// declaration's Source ("source:LINE").
func parseDeclarations(r io.Reader, source string) (KernelDeclarations, error) {
	var out KernelDeclarations
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if strings.TrimSpace(line) == "" {
			continue
		}
		d, err := parseDeclaration(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", source, n, err)
		}
		d.Source = fmt.Sprintf("%s:%d", source, n)
		out = append(out, d)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return out, nil
}

// LoadKernelDeclarations reads the declarations file at name: one
// declaration a line, "CLASS PATTERN" where CLASS is fixed, vulnerable or
// exit-may-hang and PATTERN a path.Match pattern over the whole uname -r;
// blank lines and text after '#' are ignored (see KernelDeclaration for an
// example). Errors name the file and line; each declaration's Source is
// "name:LINE".
func LoadKernelDeclarations(name string) (KernelDeclarations, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("ublk: kernel declarations: %w", err)
	}
	defer f.Close()
	return parseDeclarations(f, name)
}

// KernelDeclarations is a list of declarations that is also a flag.Value:
// each -flag value is one declaration ("fixed=6.8.0-1[0-9][0-9]-generic")
// or "@FILE" to load a declarations file; they accumulate in order, and the
// first match wins. Give the list to Config.Kernels.
type KernelDeclarations []KernelDeclaration

// String lists the declarations, comma-separated.
func (ds *KernelDeclarations) String() string {
	if ds == nil {
		return ""
	}
	parts := make([]string, len(*ds))
	for i, d := range *ds {
		parts[i] = declWord(d.Class) + "=" + d.Pattern
	}
	return strings.Join(parts, ",")
}

// Set adds one declaration, or every declaration of the file named after
// '@'.
func (ds *KernelDeclarations) Set(s string) error {
	if name, ok := strings.CutPrefix(s, "@"); ok {
		more, err := LoadKernelDeclarations(name)
		if err != nil {
			return err
		}
		*ds = append(*ds, more...)
		return nil
	}
	d, err := parseDeclaration(s)
	if err != nil {
		return err
	}
	d.Source = "flag"
	*ds = append(*ds, d)
	return nil
}
