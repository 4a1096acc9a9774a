package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// LogRequest asks for a piece of a worker's log, by byte offset, so that a
// reader on another machine can follow a log through short, repeatable
// requests (a lost or repeated request reads the same bytes again).
type LogRequest struct {
	ID WorkerID `json:"id"`
	// Node is where the worker was placed: the node whose agent holds its
	// log (the local backend). Backends that read logs centrally ignore it.
	Node string `json:"node,omitempty"`
	// Offset is where to start reading. A log that is now shorter than
	// Offset was replaced, and is read from its start (LogChunk.Reset).
	Offset int64 `json:"offset"`
	// Tail, when > 0, starts at the beginning of the log's last Tail lines
	// instead of Offset (for the first read of a log).
	Tail int `json:"tail,omitempty"`
	// MaxBytes bounds the chunk; 0 or more than MaxLogChunk means MaxLogChunk.
	MaxBytes int `json:"max_bytes,omitempty"`
}

// MaxLogChunk bounds one chunk: it travels in one Temporal payload.
const MaxLogChunk = 256 << 10

// Validate checks the request before anything is read.
func (r LogRequest) Validate() error {
	if err := r.ID.Validate(); err != nil {
		return err
	}
	if r.Offset < 0 {
		return fmt.Errorf("offset: must be >= 0, got %d", r.Offset)
	}
	if r.Tail < 0 {
		return fmt.Errorf("tail: must be >= 0, got %d", r.Tail)
	}
	if r.MaxBytes < 0 {
		return fmt.Errorf("max_bytes: must be >= 0, got %d", r.MaxBytes)
	}
	return nil
}

// Limit is the most bytes one chunk of this request may hold.
func (r LogRequest) Limit() int {
	if r.MaxBytes <= 0 || r.MaxBytes > MaxLogChunk {
		return MaxLogChunk
	}
	return r.MaxBytes
}

// LogChunk is a piece of a worker's log.
type LogChunk struct {
	Data []byte `json:"data"`
	// Offset is where Data starts in the log.
	Offset int64 `json:"offset"`
	// Size is the log's length when it was read: Offset+len(Data) < Size
	// means there is more to read now.
	Size int64 `json:"size"`
	// Reset says the log was shorter than the offset asked for (replaced or
	// truncated), so this chunk starts again at the beginning.
	Reset bool `json:"reset,omitempty"`
}

// Next is where the read after this chunk starts.
func (c LogChunk) Next() int64 { return c.Offset + int64(len(c.Data)) }

// More reports whether the log held more than this chunk when read.
func (c LogChunk) More() bool { return c.Next() < c.Size }

// LogReader is implemented by backends (and by readers that reach a
// backend through a node's agent) that can read a worker's log in chunks.
// A worker that was never started is ErrNotFound (wrapped).
type LogReader interface {
	ReadLog(ctx context.Context, req LogRequest) (LogChunk, error)
}

// LogSource is what a process that does not run the backend (the CLI, the
// REST API) reads workers' logs through: a LogReader that can say, before
// the first read, whether it can read anything from where it runs.
type LogSource interface {
	LogReader
	// Reachable is nil when reads may find logs; otherwise it says what is
	// missing here and where the logs live.
	Reachable() error
}

// ReadChunk answers req from a log of size bytes read through r.
func ReadChunk(r io.ReaderAt, size int64, req LogRequest) (LogChunk, error) {
	start := req.Offset
	c := LogChunk{Size: size}
	if req.Tail > 0 {
		var err error
		if start, err = TailStart(r, size, req.Tail); err != nil {
			return c, err
		}
	} else if start > size {
		start, c.Reset = 0, true
	}
	n := min(size-start, int64(req.Limit()))
	c.Offset, c.Data = start, make([]byte, n)
	if _, err := r.ReadAt(c.Data, start); err != nil && !errors.Is(err, io.EOF) {
		return c, err
	}
	return c, nil
}

// CopyLog copies the log as it is now (from the start of its last tail
// lines when tail > 0) to w, chunk by chunk, and returns where it ended.
func CopyLog(ctx context.Context, r LogReader, req LogRequest, w io.Writer) (int64, error) {
	for {
		c, err := r.ReadLog(ctx, req)
		if err != nil {
			return req.Offset, err
		}
		if _, err := w.Write(c.Data); err != nil {
			return req.Offset, err
		}
		req.Offset, req.Tail = c.Next(), 0
		if !c.More() || len(c.Data) == 0 {
			return req.Offset, nil
		}
	}
}

// TailStart returns the offset where the last n lines of r[0:size] begin.
// A final newline ends the last line; it does not start a new one.
func TailStart(r io.ReaderAt, size int64, n int) (int64, error) {
	const chunk = 64 << 10
	buf := make([]byte, chunk)
	end := size
	if size > 0 {
		if _, err := r.ReadAt(buf[:1], size-1); err != nil && err != io.EOF {
			return 0, err
		}
		if buf[0] == '\n' {
			end = size - 1
		}
	}
	lines := 0
	for pos := end; pos > 0; {
		m := min(int64(chunk), pos)
		pos -= m
		if _, err := r.ReadAt(buf[:m], pos); err != nil && err != io.EOF {
			return 0, err
		}
		for i := m - 1; i >= 0; i-- {
			if buf[i] == '\n' {
				lines++
				if lines == n {
					return pos + i + 1, nil
				}
			}
		}
	}
	return 0, nil
}
