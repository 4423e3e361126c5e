// Package procstat reads /proc/PID/stat, the kernel's one-line status of a
// process, for drainkit's callers that need a process's state (a zombie),
// its parent or when it started: one parser instead of one per caller.
//
// The command name (field 2) is the process's to choose: it may hold
// spaces, parentheses and newlines, so the fields are counted after the
// last ')' of the line, never by splitting the whole line.
//
//	st, err := procstat.Read(pid)
//	if errors.Is(err, fs.ErrNotExist) {
//		// gone: exited and reaped
//	}
//	zombie := st.State == 'Z'
//
// Read gives no guarantee that pid is still the process the caller means:
// a PID is reused once its process is reaped. A caller that signals a
// process pins it with package proc instead.
package procstat
