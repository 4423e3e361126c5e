package gracefit_test

import (
	"fmt"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/gracefit"
)

// One round of 20 s of preserves and a device teardown of 2 s: 22 s of
// work, after the default margin (a tenth of the grace, 1.5 s to 5 s), fits
// a grace of 25 s, not 24 s (2.4 s of margin leave 21.6 s).
func Example() {
	phases := []deadline.Phase{{Name: "drain"},
		{Name: "preserve", Reserve: deadline.Fixed(20 * time.Second)},
		{Name: "ublk", Reserve: deadline.Fixed(2 * time.Second), Critical: true}}
	at := func(*deadline.Budget) []deadline.Phase { return phases }
	least := gracefit.Smallest(deadline.Config{}, at)
	fmt.Println("smallest grace", least)
	fmt.Println("a second less lacks", gracefit.Shortfall(least-time.Second, deadline.Config{}, at))
	// Output:
	// smallest grace 25s
	// a second less lacks 400ms
}
