// Package logbuf is a bytes buffer that a logger and a test can use at
// once: the tests that read what a drain logged (progress lines, the
// Report, a lost sandbox's ID) while the logger still writes.
//
//	var logs logbuf.Buffer
//	log := slog.New(slog.NewTextHandler(&logs, nil))
//	...
//	assert.Contains(t, logs.String(), "preserved 20/20")
//
// A Signal is the other half: a log destination that tells a test when a
// line was written, so that the test acts at that point of the timeline
// (the ublk step waiting for a VMM to close) instead of after a guess.
package logbuf
