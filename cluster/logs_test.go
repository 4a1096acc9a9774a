package cluster

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bytesLog serves ReadLog from a byte slice, like a log file on a node.
type bytesLog struct {
	data  []byte
	reads int
}

func (l *bytesLog) ReadLog(_ context.Context, req LogRequest) (LogChunk, error) {
	l.reads++
	return ReadChunk(bytes.NewReader(l.data), int64(len(l.data)), req)
}

func TestReadChunk(t *testing.T) {
	data := []byte("one\ntwo\nthree\n")
	id := WorkerID{Job: "j", Attempt: 1}
	read := func(req LogRequest) LogChunk {
		req.ID = id
		c, err := ReadChunk(bytes.NewReader(data), int64(len(data)), req)
		require.NoError(t, err)
		return c
	}
	c := read(LogRequest{Tail: 2})
	assert.Equal(t, "two\nthree\n", string(c.Data))
	assert.Equal(t, int64(4), c.Offset)
	assert.False(t, c.More())

	c = read(LogRequest{Offset: 4, MaxBytes: 3})
	assert.Equal(t, "two", string(c.Data))
	assert.Equal(t, int64(7), c.Next())
	assert.True(t, c.More())

	c = read(LogRequest{Offset: int64(len(data))})
	assert.Empty(t, c.Data, "nothing new at the end")
	assert.False(t, c.Reset)

	c = read(LogRequest{Offset: 100})
	assert.True(t, c.Reset, "an offset past the end means the log was replaced")
	assert.Equal(t, string(data), string(c.Data))
}

func TestCopyLogReadsChunkByChunk(t *testing.T) {
	var sb strings.Builder
	for range 1000 {
		sb.WriteString("0123456789\n")
	}
	l := &bytesLog{data: []byte(sb.String())}
	var out bytes.Buffer
	end, err := CopyLog(context.Background(), l, LogRequest{ID: WorkerID{Job: "j"}, MaxBytes: 1000}, &out)
	require.NoError(t, err)
	assert.Equal(t, sb.String(), out.String())
	assert.Equal(t, int64(sb.Len()), end)
	assert.Equal(t, 11, l.reads, "11000 bytes in chunks of 1000")

	out.Reset()
	_, err = CopyLog(context.Background(), l, LogRequest{ID: WorkerID{Job: "j"}, Tail: 3, MaxBytes: 1000}, &out)
	require.NoError(t, err)
	assert.Equal(t, strings.Repeat("0123456789\n", 3), out.String())
}

func TestLogRequestValidate(t *testing.T) {
	ok := LogRequest{ID: WorkerID{Job: "j"}}
	require.NoError(t, ok.Validate())
	for _, bad := range []LogRequest{
		{ID: WorkerID{Job: "../x"}},
		{ID: WorkerID{Job: "j"}, Offset: -1},
		{ID: WorkerID{Job: "j"}, Tail: -1},
		{ID: WorkerID{Job: "j"}, MaxBytes: -5},
	} {
		assert.Error(t, bad.Validate(), "%+v", bad)
	}
	assert.Equal(t, MaxLogChunk, LogRequest{MaxBytes: 1 << 30}.Limit())
}
