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
