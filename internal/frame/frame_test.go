package frame

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestWriteIsLengthPrefixedJSON(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, Write(&buf, map[string]string{"kind": "shutdown"}))
	assert.Equal(t, append([]byte{0, 0, 0, 19}, `{"kind":"shutdown"}`...), buf.Bytes())
}

func TestReadRoundTripsAndStopsAtTheFrame(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, Write(&buf, map[string]string{"status": "ok"}))
	require.NoError(t, Write(&buf, map[string]string{"status": "second"}))
	var got struct{ Status string }
	require.NoError(t, Read(&buf, &got))
	assert.Equal(t, "ok", got.Status)
	require.NoError(t, Read(&buf, &got))
	assert.Equal(t, "second", got.Status)
	assert.ErrorIs(t, Read(&buf, &got), io.EOF)
}

func TestReadRejectsOversizedAndTruncatedFrames(t *testing.T) {
	var v any
	err := Read(bytes.NewReader([]byte{0xff, 0xff, 0xff, 0xff}), &v)
	assert.ErrorContains(t, err, "exceeds")
	err = Read(bytes.NewReader(append([]byte{0, 0, 0, 10}, `{"a"`...)), &v)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
}

func Example() {
	var conn bytes.Buffer // a Unix socket connection in real use
	_ = Write(&conn, map[string]string{"kind": "shutdown"})
	fmt.Printf("% x\n", conn.Bytes()[:4])
	var req struct{ Kind string }
	_ = Read(&conn, &req)
	fmt.Println(req.Kind)
	// Output:
	// 00 00 00 13
	// shutdown
}
