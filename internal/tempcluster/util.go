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

// lowPortsGiven are the ports freeLowPort has returned in this process. A
// port is free when picked but bound only when its service starts, so a
// later pick (another port of the same cluster, or another cluster) could be
// the same one, and the service that starts second fails ("bind: address
// already in use").
var lowPortsGiven = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// freeLowPort returns a free TCP port of 127.0.0.1 below 32768, one it has
// not returned before: the cluster_membership table keeps a service's
// membership port as a smallint, and the kernel's ephemeral ports (what
// FreePort gets) start at 32768.
func freeLowPort() (int, error) {
	lowPortsGiven.Lock()
	defer lowPortsGiven.Unlock()
	for try := 0; try < 200; try++ {
		port := 20000 + rand.IntN(12000)
		if lowPortsGiven.ports[port] {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		_ = l.Close()
		lowPortsGiven.ports[port] = true
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
