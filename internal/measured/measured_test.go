package measured

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Each condition of the rule, alone, keeps a preserve from being a sample.
func TestSampleIsAFirstAttemptPreservedInTimeAndNotAgain(t *testing.T) {
	sample := Preserve{Preserved: true, Attempts: 1, Took: time.Second}
	assert.True(t, Sample(sample))
	for name, p := range map[string]Preserve{
		"not preserved":    {Attempts: 1, Took: time.Second},
		"a second attempt": {Preserved: true, Attempts: 2, Took: time.Second},
		"never attempted":  {Preserved: true, Took: time.Second},
		"a preserve again": {Preserved: true, Attempts: 1, Relisted: 1, Took: time.Second},
		"no time":          {Preserved: true, Attempts: 1},
		"a negative time":  {Preserved: true, Attempts: 1, Took: -time.Second},
	} {
		assert.False(t, Sample(p), name)
	}
}
