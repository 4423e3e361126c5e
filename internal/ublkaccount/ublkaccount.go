package ublkaccount

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/drainkit/drainkit/ublk"
)

// Account is the part of a ublk teardown's Report an operator reads first.
type Account struct {
	Verdict     ublk.Verdict
	Note        string
	Kernel      string
	KernelClass ublk.KernelClass
	Devices     []Device
}

// Device is one device's ID and verdict.
type Device struct {
	ID      int          `json:"id"`
	Verdict ublk.Verdict `json:"verdict"`
}

// Read is the account a step's Detail holds: the *ublk.Report the step
// returned, or, in a Report read back from its JSON, the same read through
// its JSON (an object with "verdict", "kernel_class" and "devices", as every
// ublk Report has). ok is false for a nil detail and any other.
func Read(detail any) (*Account, bool) {
	switch r := detail.(type) {
	case nil:
		return nil, false
	case *ublk.Report:
		if r == nil {
			return nil, false
		}
		a := &Account{Verdict: r.Verdict, Note: r.Note, Kernel: r.Kernel, KernelClass: r.KernelClass}
		for _, d := range r.Devices {
			a.Devices = append(a.Devices, Device{ID: d.ID, Verdict: d.Verdict})
		}
		return a, true
	}
	b, err := json.Marshal(detail)
	if err != nil {
		return nil, false
	}
	var in struct {
		Verdict     *ublk.Verdict     `json:"verdict"`
		KernelClass *ublk.KernelClass `json:"kernel_class"`
		Devices     *[]Device         `json:"devices"`
		Note        string            `json:"note"`
		Kernel      string            `json:"kernel"`
	}
	if json.Unmarshal(b, &in) != nil || in.Verdict == nil || *in.Verdict == "" || in.KernelClass == nil || in.Devices == nil {
		return nil, false
	}
	return &Account{Verdict: *in.Verdict, Note: in.Note, Kernel: in.Kernel, KernelClass: *in.KernelClass, Devices: *in.Devices}, true
}

// Line is the account on one line: "ublk teardown: VERDICT, N devices",
// then ": NOTE" when there is one (its line breaks made "; "), naming the
// step when it is not "ublk" ("ublk teardown (step daemon): ...").
func (a *Account) Line(step string) string {
	line := a.Head(step)
	if a.Note != "" {
		line += ": " + strings.ReplaceAll(a.Note, "\n", "; ")
	}
	return line
}

// Head is Line without the Note: "ublk teardown: VERDICT, N devices".
func (a *Account) Head(step string) string {
	head := "ublk teardown"
	if step != "" && step != "ublk" {
		head += " (step " + step + ")"
	}
	return fmt.Sprintf("%s: %s, %s", head, a.Verdict, devices(len(a.Devices)))
}

// devices is "no device", "1 device" or "N devices".
func devices(n int) string {
	switch n {
	case 0:
		return "no device"
	case 1:
		return "1 device"
	}
	return fmt.Sprintf("%d devices", n)
}
