package budgetconf

import (
	"fmt"
	"time"
)

// Of returns budget's (a *deadline.Budget's) deadline.Config.Margin (zero:
// the default for the grace in use) and deadline.Config.PreStopSleep.
// Package deadline installs it when it is initialised.
var Of = func(budget any) (margin, sleep time.Duration) {
	panic(fmt.Sprintf("budgetconf: no deadline package in this program to read %T's configuration", budget))
}
