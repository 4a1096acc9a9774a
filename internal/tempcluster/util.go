package tempcluster

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
)

// FreePort returns a TCP port of 127.0.0.1 that was free when asked.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// freeLowPort returns a free TCP port of 127.0.0.1 below 32768: the
// cluster_membership table keeps a service's membership port as a smallint,
// and the kernel's ephemeral ports (what FreePort gets) start at 32768.
func freeLowPort() (int, error) {
	for try := 0; try < 200; try++ {
		port := 20000 + rand.IntN(12000)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		_ = l.Close()
		return port, nil
	}
	return 0, errors.New("no free port in 20000-31999")
}

func tail(text string, lines int) string {
	parts := strings.Split(text, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

// syncBuffer is a bytes.Buffer a process's output goroutines write while a
// caller reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
