package procstat_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/drainkit/drainkit/internal/procstat"
)

// reference is the straightforward reading of a stat line that Parse must
// agree with: the PID before the first " (", the command name up to the
// last ')', the fields after it split on white space.
func reference(s string) (procstat.Stat, bool) {
	pid, rest, ok := strings.Cut(s, " (")
	if !ok {
		return procstat.Stat{}, false
	}
	end := strings.LastIndex(rest, ")")
	if end < 0 {
		return procstat.Stat{}, false
	}
	f := strings.FieldsFunc(rest[end+1:], func(r rune) bool { return strings.ContainsRune(" \t\n\v\f\r", r) })
	if len(f) < 20 || len(f[0]) != 1 { // f[0] is field 3, the state; f[19] field 22
		return procstat.Stat{}, false
	}
	st := procstat.Stat{Comm: rest[:end], State: f[0][0]}
	var err1, err2, err3 error
	st.PID, err1 = strconv.Atoi(pid)
	st.PPID, err2 = strconv.Atoi(f[1])
	st.StartTime, err3 = strconv.ParseUint(f[19], 10, 64)
	return st, err1 == nil && err2 == nil && err3 == nil
}

// FuzzParse checks that Parse never panics, and that it accepts exactly
// the lines the reference accepts, with the same fields.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		line("sleep", "S"),
		line("a) b (c", "Z"),
		line("x\ny", "R"),
		line("", "X"),
		"2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 1 5 0 0 20 0 1 0 20 0 0 18446744073709551615 0 0 0 0 0 0 0 2147483647 0 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
		"4242 (drain hook) S 1 4242\n",
		"4242 (drain hook) S one 4242 4242 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 x\n",
		"",
		"4242 drain hook\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := procstat.Parse(b)
		want, ok := reference(string(b))
		switch {
		case ok && err != nil:
			t.Fatalf("%q: reference reads %+v, Parse fails: %v", b, want, err)
		case !ok && err == nil:
			t.Fatalf("%q: reference refuses it, Parse reads %+v", b, got)
		case ok && got != want:
			t.Fatalf("%q: Parse reads %+v, reference %+v", b, got, want)
		}
	})
}
