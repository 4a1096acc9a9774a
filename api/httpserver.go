package api

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// ServerOptions are the connection limits of the API's HTTP server.
type ServerOptions struct {
	// HeaderTimeout bounds reading a request's headers (default 10s). A
	// client that has not sent them by then is disconnected.
	HeaderTimeout time.Duration
	// BodyTimeout bounds reading a request's body, counted from the end of
	// its headers (default DefaultBodyTimeout); it must equal the Server's
	// Options.BodyTimeout, which answers 408 when it passes.
	BodyTimeout time.Duration
	// WriteTimeout bounds writing an answer (default 2m); log answers renew
	// their own deadline with each write instead.
	WriteTimeout time.Duration
	// IdleTimeout closes a kept-alive connection with no request (default 2m).
	IdleTimeout time.Duration
	// MaxConnsPerClient bounds the open connections of one client address
	// (default 64); further ones are answered 429 and closed.
	MaxConnsPerClient int
}

func (o *ServerOptions) defaults() {
	if o.HeaderTimeout <= 0 {
		o.HeaderTimeout = 10 * time.Second
	}
	if o.BodyTimeout <= 0 {
		o.BodyTimeout = DefaultBodyTimeout
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 2 * time.Minute
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 2 * time.Minute
	}
	if o.MaxConnsPerClient <= 0 {
		o.MaxConnsPerClient = 64
	}
}

// NewHTTPServer returns the http.Server that serves h with o's timeouts:
// the whole request (headers and body) must arrive within HeaderTimeout +
// BodyTimeout, so no request of any shape holds a connection for ever.
// Serve it on Listener(ln, o) for the per-client connection limit.
func NewHTTPServer(h http.Handler, o ServerOptions) *http.Server {
	o.defaults()
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: o.HeaderTimeout,
		ReadTimeout:       o.HeaderTimeout + o.BodyTimeout,
		WriteTimeout:      o.WriteTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
	}
}

// Listener wraps ln so that one client address (the IP, whatever the port)
// has at most o.MaxConnsPerClient connections open at a time. A connection
// over the limit is answered 429 Too Many Requests and closed; the
// connections the client already has are not disturbed. refused, if not
// nil, is called for each.
func Listener(ln net.Listener, o ServerOptions, refused func()) net.Listener {
	o.defaults()
	return &clientLimit{Listener: ln, max: o.MaxConnsPerClient, open: map[string]int{}, refused: refused,
		refusing: make(chan struct{}, 64)}
}

type clientLimit struct {
	net.Listener
	max      int
	refused  func()
	refusing chan struct{} // bounds the refusals being written at once

	mu   sync.Mutex
	open map[string]int
}

func clientOf(a net.Addr) string {
	if host, _, err := net.SplitHostPort(a.String()); err == nil {
		return host
	}
	return a.String()
}

func (l *clientLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		client := clientOf(c.RemoteAddr())
		l.mu.Lock()
		if l.open[client] >= l.max {
			l.mu.Unlock()
			if l.refused != nil {
				l.refused()
			}
			l.refuse(c)
			continue
		}
		l.open[client]++
		l.mu.Unlock()
		return &limitedConn{Conn: c, release: func() {
			l.mu.Lock()
			if l.open[client]--; l.open[client] <= 0 {
				delete(l.open, client)
			}
			l.mu.Unlock()
		}}, nil
	}
}

// tooManyAnswer is the answer to a connection over the limit.
var tooManyAnswer = func() []byte {
	body, _ := json.Marshal(map[string]*Error{"error": {Code: codeTooManyConns,
		Message: "too many connections from your address at once; close some (or wait for them to finish) and try again"}})
	return []byte(fmt.Sprintf("HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: %s\r\n\r\n%s",
		strconv.Itoa(len(body)), body))
}()

// refuse answers 429 and closes c, in the background and briefly; when too
// many refusals are under way it just closes c.
func (l *clientLimit) refuse(c net.Conn) {
	select {
	case l.refusing <- struct{}{}:
	default:
		_ = c.Close()
		return
	}
	go func() {
		defer func() { <-l.refusing }()
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write(tooManyAnswer); err != nil {
			return
		}
		// Close gently: a reset could discard the answer before the
		// client reads it. Read (and drop) what the client sends meanwhile.
		if tc, ok := c.(interface{ CloseWrite() error }); ok {
			_ = tc.CloseWrite()
		}
		buf := make([]byte, 4096)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
		}
	}()
}

// limitedConn gives its place back when it is closed.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}
