package ublkaccount_test

import (
	"encoding/json"
	"fmt"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/ublkaccount"
	"github.com/drainkit/drainkit/ublk"
)

// The account as the step made it and as a Report file gives it back: the
// same line.
func Example() {
	made := &ublk.Report{Verdict: ublk.VerdictNothingToDo, Devices: []ublk.DeviceReport{},
		Note: "no ublk devices (no class/ublk-char in sysfs: the ublk_drv module is not loaded) and no daemon"}
	b, _ := json.Marshal(made)
	var file any // what a Report read back from its JSON holds in Detail
	_ = json.Unmarshal(b, &file)

	for _, detail := range []any{made, file} {
		if a, ok := ublkaccount.Read(detail); ok {
			fmt.Println(a.Line("ublk"))
		}
	}
	// Output:
	// ublk teardown: nothing_to_do, no device: no ublk devices (no class/ublk-char in sysfs: the ublk_drv module is not loaded) and no daemon
	// ublk teardown: nothing_to_do, no device: no ublk devices (no class/ublk-char in sysfs: the ublk_drv module is not loaded) and no daemon
}

// The line of every step of a drain's Report whose Detail is a ublk
// teardown's, under the step's name.
func ExampleRead() {
	rep := &drain.Report{Phases: []drain.PhaseReport{{Name: "preserve"},
		{Name: "daemon", Detail: &ublk.Report{Verdict: ublk.VerdictStopped, Devices: make([]ublk.DeviceReport, 2)}}}}
	for _, p := range rep.Phases {
		if a, ok := ublkaccount.Read(p.Detail); ok {
			fmt.Println(a.Line(p.Name))
		}
	}
	// Output:
	// ublk teardown (step daemon): stopped, 2 devices
}
