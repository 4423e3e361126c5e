package prestopsleep

import (
	"fmt"
	"time"
)

// Of returns the preStop sleep budget (a *deadline.Budget) was declared
// with, zero for none.
var Of = func(budget any) time.Duration {
	panic(fmt.Sprintf("prestopsleep: no deadline package in this program to read %T's sleep", budget))
}
