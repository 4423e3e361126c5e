package gaterefusals

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"
)

// MaxKinds bounds the kinds (way in and class) the account keeps apart:
// a classify that made a class of each path would otherwise grow it with
// every request. drain counts the refusals of a kind past it under the
// class "other" of its way, so a Detail drain made names at most MaxKinds
// kinds and an "other" for each way in.
const MaxKinds = 32

// Detail is the gate phase's Detail: the operations the gate refused
// during the drain, counts alone however many requests were refused (see
// drain.PhaseReport.Detail for what each field holds).
type Detail struct {
	Refused    int                       `json:"refused"`
	By         map[string]map[string]int `json:"by,omitempty"` // by way in, then class
	First      time.Time                 `json:"first,omitzero"`
	FirstPhase string                    `json:"first_phase,omitempty"` // "" for a refusal before the drain began (see PhaseName)
	Last       time.Time                 `json:"last,omitzero"`
	LastPhase  string                    `json:"last_phase,omitempty"`
}

// beforeDrain is how the account names the moment of a refusal no phase
// of the drain was running at.
const beforeDrain = "before the drain"

// PhaseName is phase, a Detail's FirstPhase or LastPhase, as drain's log
// line names it: itself, or "before the drain" for "", a refusal no phase
// ran at (a gate the server's own code closed before Shutdown began: it
// stops taking work at its own signal, then drains).
func PhaseName(phase string) string {
	if phase == "" {
		return beforeDrain
	}
	return phase
}

// During is when a refusal in phase came, as termmsg's line says it:
// "during preserve", or "before the drain" (see PhaseName).
func During(phase string) string {
	if phase == "" {
		return beforeDrain
	}
	return "during " + phase
}

// Kinds is d's counts by way in and class, sorted by way and then class:
// "grpc create 1", "http create 3".
func (d *Detail) Kinds() []string {
	var out []string
	for _, w := range slices.Sorted(maps.Keys(d.By)) {
		for _, c := range slices.Sorted(maps.Keys(d.By[w])) {
			out = append(out, fmt.Sprintf("%s %s %d", w, c, d.By[w][c]))
		}
	}
	return out
}

// Read is the account a gate phase's Detail holds: the *Detail drain made,
// or, in a Report read back from its JSON (where Detail is a map), the same
// read through its JSON. ok is false for a nil detail and for one that is
// no account of refusals (a field of another type).
func Read(detail any) (d *Detail, ok bool) {
	switch v := detail.(type) {
	case nil:
		return nil, false
	case *Detail:
		return v, v != nil
	}
	b, err := json.Marshal(detail)
	if err != nil {
		return nil, false
	}
	d = new(Detail)
	if err := json.Unmarshal(b, d); err != nil {
		return nil, false
	}
	return d, true
}
