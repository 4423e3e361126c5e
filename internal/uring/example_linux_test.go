//go:build linux

package uring_test

import (
	"context"
	"fmt"
	"time"

	"github.com/drainkit/drainkit/internal/uring"
)

// A NOP round trip: the smallest proof that the kernel's io_uring works.
func Example() {
	r, err := uring.New(4, uring.SetupSQE128)
	if err != nil {
		fmt.Println("io_uring unavailable:", err)
		return
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	cqe, err := r.SubmitAndWait(ctx, uring.Nop(42))
	fmt.Println(cqe.UserData, cqe.Res, err)
	// Output: 42 0 <nil>
}
