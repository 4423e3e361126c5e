package durflag

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// maxSeconds is the most whole seconds a time.Duration holds.
const maxSeconds = int64(math.MaxInt64 / time.Second)

// ParseGrace parses a grace period: whole seconds (30) as the pod's
// terminationGracePeriodSeconds, or a Go duration (30s, 1m30s, 100ms). It
// must be positive; its error says what was wanted and what was given.
func ParseGrace(v string) (time.Duration, error) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		switch {
		case n <= 0:
			return 0, fmt.Errorf("must be positive, got %q", v)
		case n > maxSeconds: // beyond, n x 1e9 wraps round
			return 0, fmt.Errorf("want at most %d seconds, got %q", maxSeconds, v)
		}
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		return 0, fmt.Errorf("want whole seconds (30) or a duration (30s, 1m30s), got %q", v)
	case d <= 0:
		return 0, fmt.Errorf("must be positive, got %q", v)
	}
	return d, nil
}

// GraceVar defines a flag name, with default value and usage, that sets
// *p to a grace period (ParseGrace). A default of zero means not given:
// the flag's usage then shows no default. A usage without a back-quoted
// name (the flag package's placeholder) gets ", in `seconds` or as a
// duration (30s)": the help reads -grace seconds.
func GraceVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	if !strings.Contains(usage, "`") {
		usage += ", in `seconds` or as a duration (30s)"
	}
	fs.Var((*grace)(p), name, usage)
}

type grace time.Duration

func (g *grace) String() string {
	if g == nil || *g == 0 {
		return ""
	}
	return time.Duration(*g).String()
}

func (g *grace) Set(v string) error {
	d, err := ParseGrace(v)
	if err != nil {
		return err
	}
	*g = grace(d)
	return nil
}

func (g *grace) Get() any { return time.Duration(*g) }

// DurationVar defines a flag name, with default value and usage, that sets
// *p to a Go duration, as flag.FlagSet.DurationVar does, but whose error
// says what is wanted where the flag package says only "parse error": a
// bare number gets its units named. A usage without a back-quoted name
// gets ", a `duration`": the help reads -pause duration, as for
// flag.FlagSet.DurationVar.
func DurationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	if !strings.Contains(usage, "`") {
		usage += ", a `duration`"
	}
	fs.Var((*duration)(p), name, usage)
}

type duration time.Duration

func (d *duration) String() string {
	if d == nil {
		return "0s"
	}
	return time.Duration(*d).String()
}

func (d *duration) Set(v string) error {
	x, err := time.ParseDuration(v)
	if err == nil {
		*d = duration(x)
		return nil
	}
	if _, nerr := strconv.ParseFloat(v, 64); nerr == nil {
		return fmt.Errorf("want a duration with its unit (%sms, %ss, %sm), got %q", v, v, v, v)
	}
	return fmt.Errorf("want a duration such as 500ms, 30s or 1m30s, got %q", v)
}

func (d *duration) Get() any { return time.Duration(*d) }
