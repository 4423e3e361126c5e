//go:build !linux

package escalate

import (
	"errors"
	"syscall"
	"time"
)

func openPidfd(int) (int, error) { return -1, errors.ErrUnsupported }

func pidfdSignal(int, syscall.Signal) error { return errors.ErrUnsupported }

func pidfdExited(int, time.Duration) (bool, error) { return false, errors.ErrUnsupported }

func closeFd(int) error { return nil }
