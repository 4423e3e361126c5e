package measured

import "time"

// Preserve is how one preserve of a sandbox ended, as pause.Entry has it.
type Preserve struct {
	// Preserved is whether its outcome is pause.Preserved.
	Preserved bool
	// Attempts is the Preserve calls it made (pause.Entry.Attempts).
	Attempts int
	// Relisted counts the preserves again of a sandbox a later listing
	// showed running (pause.Entry.Relisted).
	Relisted int
	// Took is the time from its start to its end (pause.Entry.Duration).
	Took time.Duration
}

// Sample reports whether p is a measurement of the concurrency it ran at:
// preserved at its first attempt, in a time above zero, and not a preserve
// again (see the package doc).
func Sample(p Preserve) bool {
	return p.Preserved && p.Attempts == 1 && p.Relisted == 0 && p.Took > 0
}
