//go:build !linux

package early

// roleEnv makes the test binary the consumer program; there is none here.
const roleEnv = "EARLY_TEST_CONSUMER"

func consumer() int { return 3 }
