package procstat_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/procstat"
)

// line is a /proc/PID/stat line as the kernel writes it (52 fields), of
// pid 4242 named comm, in state, child of 1, started 6831140 ticks after
// the boot.
func line(comm, state string) string {
	return "4242 (" + comm + ") " + state + " 1 4242 4242 0 -1 4194560 99 0 0 0 0 0 0 0 20 0 1 0 6831140 " +
		"3133440 382 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 1 1 1 1 1 1 1 0\n"
}

// The command name may hold anything but NUL, parentheses, spaces and
// newlines included: the fields are counted after its last ')'.
func TestParseCountsTheFieldsAfterTheLastParenthesis(t *testing.T) {
	for _, comm := range []string{"sleep", "drain hook", "a) b", ") (", "(", ")", "x\ny", "S 1 2 3", "", "kworker/u8:2-events_unbound"} {
		st, err := procstat.Parse([]byte(line(comm, "S")))
		require.NoError(t, err, "%q", comm)
		assert.Equal(t, procstat.Stat{PID: 4242, Comm: comm, State: 'S', PPID: 1, StartTime: 6831140}, st, "%q", comm)
	}
}

func TestParseReadsEveryState(t *testing.T) {
	for _, state := range []byte("RSDZXTtIPKWx") {
		st, err := procstat.Parse([]byte(line("p", string(state))))
		require.NoError(t, err)
		assert.Equal(t, state, st.State)
	}
}

// An older kernel writes fewer fields (44 in 2.6); the line needs only to
// reach field 22, starttime, and its end of line is optional.
func TestParseNeedsTheLineToReachStartTime(t *testing.T) {
	f := strings.Fields(line("p", "R"))
	st, err := procstat.Parse([]byte(strings.Join(f[:22], " ")))
	require.NoError(t, err)
	assert.Equal(t, uint64(6831140), st.StartTime)

	_, err = procstat.Parse([]byte(strings.Join(f[:21], " ") + "\n"))
	assert.EqualError(t, err, "procstat: truncated: 21 fields, want at least 22 (starttime is field 22)")
}

// Bad input gets an error that says what is wrong with it.
func TestParseSaysWhatIsWrong(t *testing.T) {
	good := line("drain hook", "S")
	for in, want := range map[string]string{
		"":                                            "procstat: empty",
		"4242 drain hook S 1\n":                       `procstat: no command name in parentheses in "4242 drain hook S 1\n"`,
		"4242 (drain hook S 1\n":                      `procstat: no command name in parentheses in "4242 (drain hook S 1\n"`,
		"4242 ) (drain\n":                             `procstat: no command name in parentheses in "4242 ) (drain\n"`,
		"(drain hook) S 1\n":                          `procstat: want "PID (" before the command name, got "("`,
		"4242(drain hook) S 1\n":                      `procstat: want "PID (" before the command name, got "4242("`,
		strings.Replace(good, "4242", "x42", 1):       `procstat: field 1 (pid) "x42": not a number`,
		"4242 (drain hook)\n":                         "procstat: truncated: 2 fields, want at least 22 (starttime is field 22)",
		"4242 (drain hook) S\n":                       "procstat: truncated: 3 fields, want at least 22 (starttime is field 22)",
		strings.Replace(good, ") S ", ") SS ", 1):     `procstat: field 3 (state) "SS": want one letter`,
		strings.Replace(good, " S 1 ", " S one ", 1):  `procstat: field 4 (ppid) "one": not a number`,
		strings.Replace(good, " 6831140 ", " -5 ", 1): `procstat: field 22 (starttime) "-5": not a number of clock ticks`,
		strings.Replace(good, " 6831140 ", " 99999999999999999999 ", 1): `procstat: field 22 (starttime) "99999999999999999999": not a number of clock ticks`,
	} {
		_, err := procstat.Parse([]byte(in))
		assert.EqualError(t, err, want, "%q", in)
	}
}

// The fields Stat does not hold are not looked at: a kernel that changes
// one does not break the callers.
func TestParseIgnoresTheFieldsItDoesNotReturn(t *testing.T) {
	f := strings.Fields(line("p", "S"))
	f[4], f[30] = "pgrp?", "?"
	st, err := procstat.Parse([]byte(strings.Join(f, " ")))
	require.NoError(t, err)
	assert.Equal(t, 4242, st.PID)
}
