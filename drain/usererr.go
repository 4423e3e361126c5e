package drain

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// readableErr is err, which who (a user's code: the Lister, a step)
// returned, or, when err's Error or Unwrap would panic, an error naming
// its type that says so, and, for a typed nil, then: what became of the
// call. Such an error (a nil *T returned as an error, Go's FAQ "Why is my
// nil error value not equal to nil?"; an Error that reads a field of an
// answer that never came) is met here, in a recover: met later, by a log
// line, errors.Is or the Report on the drain's goroutine, it ended the
// process mid-drain. Pause treats its own callers' so (docs/faults.md
// rows 1881, 1882).
func readableErr(err error, who, then string) (readable error) {
	if err == nil {
		return nil
	}
	if isNilValue(err) { // its methods dereference the nil: not called
		return fmt.Errorf("drain: %s returned a nil %T as its error, which is not a nil error: %s", who, err, then)
	}
	defer func() {
		if v := recover(); v != nil {
			readable = fmt.Errorf("drain: %s returned an error (%T) whose Error or Unwrap panicked: %v", who, err, v)
		}
	}()
	_ = err.Error()
	_ = errors.Is(err, context.Canceled) // its Unwrap chain
	return err
}

// detailText is what detail, a step's Detail, says of itself when it is a
// fmt.Stringer (the ublk step's verdict per device), trimmed; "" when it
// says nothing. A String that panics (a nil *T returned beside the step's
// error, a report its step never filled) is met here, in a recover, and
// said instead: read by the step's event on the drain's goroutine, it
// ended the process after the preserve phase, the later steps not run.
func detailText(detail any) (text string) {
	s, ok := detail.(fmt.Stringer)
	if !ok {
		return ""
	}
	defer func() {
		if v := recover(); v != nil {
			text = fmt.Sprintf("its Detail (%T) panicked in String: %v", detail, v)
		}
	}()
	return strings.TrimSpace(s.String())
}
