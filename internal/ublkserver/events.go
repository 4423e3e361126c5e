package ublkserver

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// Events a server writes to Config.EventLog.
const (
	EventStarted  = "started"  // START_DEV done: the disk exists
	EventStopping = "stopping" // about to send STOP_DEV
	EventDeleted  = "deleted"  // DEL_DEV done

	// EventHeldRead and EventHeldWrite: a frozen server received a read
	// (a write) and holds it unanswered until a thaw, one line per
	// request. The disk's inflight count cannot tell a held request from
	// one being answered when the freeze came; this can.
	EventHeldRead  = "held_read"
	EventHeldWrite = "held_write"
)

// Event is one line of an event log.
type Event struct {
	At     time.Time
	Kind   string
	Device int
}

// ReadEvents parses the event log at path; a missing file has no events.
func ReadEvents(path string) ([]Event, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Event
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var ns int64
		var e Event
		if _, err := fmt.Sscanf(line, "%d %s %d", &ns, &e.Kind, &e.Device); err != nil {
			return nil, fmt.Errorf("ublkserver: event log line %q: %w", line, err)
		}
		e.At = time.Unix(0, ns)
		out = append(out, e)
	}
	return out, nil
}

// First returns the first event of kind for device id, and false when
// there is none.
func First(events []Event, kind string, id int) (Event, bool) {
	for _, e := range events {
		if e.Kind == kind && e.Device == id {
			return e, true
		}
	}
	return Event{}, false
}
