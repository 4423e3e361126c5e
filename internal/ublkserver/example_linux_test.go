//go:build linux

package ublkserver_test

import (
	"context"
	"fmt"
	"time"

	"github.com/drainkit/drainkit/internal/ublkserver"
)

// A server is sized by Config; bad sizes fail before any device exists.
func ExampleStart() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := ublkserver.Start(ctx, ublkserver.Config{Size: 1000})
	fmt.Println(err)
	// Output:
	// ublkserver: Config.Size 1000 is not a positive multiple of 4096
}
