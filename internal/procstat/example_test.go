package procstat_test

import (
	"fmt"

	"github.com/drainkit/drainkit/internal/procstat"
)

// The command name is the process's to choose: fields are counted after
// its last ')'.
func ExampleParse() {
	line := "4242 (drain (hook)) Z 1 4242 4242 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 6831140 0 0\n"
	st, err := procstat.Parse([]byte(line))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("pid %d comm %q state %c ppid %d start %d ticks after boot\n", st.PID, st.Comm, st.State, st.PPID, st.StartTime)

	_, err = procstat.Parse([]byte("4242 (drain (hook)) Z 1 4242\n"))
	fmt.Println(err)
	// Output:
	// pid 4242 comm "drain (hook)" state Z ppid 1 start 6831140 ticks after boot
	// procstat: truncated: 5 fields, want at least 22 (starttime is field 22)
}
