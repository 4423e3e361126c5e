package procstat

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"syscall"
)

// Stat is what /proc/PID/stat says of a process: the fields drainkit
// reads, numbered as in proc_pid_stat(5).
type Stat struct {
	// PID is field 1, the process ID as this /proc's PID namespace sees it.
	PID int
	// Comm is field 2, the command name, without its parentheses. It may
	// hold any byte but NUL.
	Comm string
	// State is field 3: 'R' running, 'S' sleeping, 'D' in an
	// uninterruptible wait, 'Z' a zombie (exited, not reaped), 'X' dead
	// (being reaped), 'T' stopped, 't' traced, and the few others of
	// proc_pid_stat(5).
	State byte
	// PPID is field 4, the parent's PID (0 for a process whose parent is
	// outside this /proc's PID namespace, as init's).
	PPID int
	// StartTime is field 22, when the process started, in clock ticks
	// (USER_HZ, 100 per second) after the boot (btime in /proc/stat).
	StartTime uint64
}

// Read reads and parses /proc/PID/stat. When the process does not exist
// (it never did, or has exited and been reaped, including between the open
// and the read), the error wraps fs.ErrNotExist; a zombie is still there
// (State 'Z'). Any other error names the file and what is wrong with it.
// A pid <= 0 is refused.
func Read(pid int) (Stat, error) {
	if pid <= 0 {
		return Stat{}, fmt.Errorf("procstat: pid %d: must be > 0", pid)
	}
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	f, err := os.Open(path)
	if err != nil {
		return Stat{}, fmt.Errorf("procstat: %w", err) // an *fs.PathError naming path
	}
	defer f.Close()
	return read(f, path)
}

// read reads the stat file f, opened from path, to its end and parses it.
func read(f io.Reader, path string) (Stat, error) {
	b, err := io.ReadAll(f)
	if errors.Is(err, syscall.ESRCH) {
		// The process was reaped after the open: the kernel answers the
		// read with ESRCH; it is as gone as one whose file is missing.
		return Stat{}, fmt.Errorf("procstat: read %s: %w (%w)", path, fs.ErrNotExist, syscall.ESRCH)
	}
	if err != nil {
		return Stat{}, fmt.Errorf("procstat: %w", err) // an *fs.PathError naming path
	}
	st, err := parse(b)
	if err != nil {
		return Stat{}, fmt.Errorf("procstat: %s: %w", path, err)
	}
	return st, nil
}

// Parse parses the contents of a /proc/PID/stat file. It checks the fields
// Stat holds and that the line reaches field 22; the fields it does not
// return are not looked at. Its errors say what is wrong (a missing
// command name, a truncated line, a field that is not a number).
func Parse(b []byte) (Stat, error) {
	st, err := parse(b)
	if err != nil {
		return Stat{}, fmt.Errorf("procstat: %w", err)
	}
	return st, nil
}

// Field numbers of proc_pid_stat(5), counted from 1.
const (
	fieldState     = 3
	fieldPPID      = 4
	fieldStartTime = 22
)

func parse(b []byte) (Stat, error) {
	if len(b) == 0 {
		return Stat{}, errors.New("empty")
	}
	// "PID (COMM) STATE PPID ...": the PID holds no '(', so the first '('
	// opens the command name; the fields after it hold no ')', so the
	// last ')' closes it.
	open := bytes.IndexByte(b, '(')
	closing := bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open {
		return Stat{}, fmt.Errorf("no command name in parentheses in %q", excerpt(b))
	}
	if open == 0 || b[open-1] != ' ' {
		return Stat{}, fmt.Errorf("want \"PID (\" before the command name, got %q", excerpt(b[:open+1]))
	}
	var st Stat
	var err error
	if st.PID, err = strconv.Atoi(string(b[:open-1])); err != nil {
		return Stat{}, fmt.Errorf("field 1 (pid) %q: not a number", excerpt(b[:open-1]))
	}
	st.Comm = string(b[open+1 : closing])

	rest := b[closing+1:]
	n := fieldState - 1 // fields before the current one
	for n < fieldStartTime {
		var f []byte
		if f, rest = nextField(rest); f == nil {
			return Stat{}, fmt.Errorf("truncated: %d fields, want at least %d (starttime is field %d)", n, fieldStartTime, fieldStartTime)
		}
		n++
		switch n {
		case fieldState:
			if len(f) != 1 {
				return Stat{}, fmt.Errorf("field 3 (state) %q: want one letter", excerpt(f))
			}
			st.State = f[0]
		case fieldPPID:
			if st.PPID, err = strconv.Atoi(string(f)); err != nil {
				return Stat{}, fmt.Errorf("field 4 (ppid) %q: not a number", excerpt(f))
			}
		case fieldStartTime:
			if st.StartTime, err = strconv.ParseUint(string(f), 10, 64); err != nil {
				return Stat{}, fmt.Errorf("field 22 (starttime) %q: not a number of clock ticks", excerpt(f))
			}
		}
	}
	return st, nil
}

// nextField returns the first field of b (bytes between ASCII white
// space) and what follows it, or nil when b holds no more fields.
func nextField(b []byte) (field, rest []byte) {
	i := 0
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	if i == len(b) {
		return nil, nil
	}
	j := i
	for j < len(b) && !isSpace(b[j]) {
		j++
	}
	return b[i:j], b[j:]
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f'
}

// excerpt cuts b to at most 64 bytes for an error message.
func excerpt(b []byte) []byte {
	const most = 64
	if len(b) > most {
		return b[:most]
	}
	return b
}
