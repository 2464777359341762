package docker

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// hijack sends POST path with "Upgrade: tcp" on a connection of its own
// and, once the engine switches protocols, returns that connection as a
// raw byte stream (with whatever the engine sent after its answer,
// buffered in r).
func (c *apiClient) hijack(ctx context.Context, path string, q url.Values) (net.Conn, *bufio.Reader, error) {
	conn, err := c.dial(ctx, "", "")
	if err != nil {
		return nil, nil, err
	}
	if c.tls != nil {
		cfg := c.tls.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(c.ep.Addr)
		}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, nil, err
		}
		conn = tc
	}
	// The context bounds the handshake only, never the stream after it.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	req, err := http.NewRequest(http.MethodPost, c.url(path, q).String(), nil)
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "tcp")
	br := bufio.NewReaderSize(conn, 64<<10)
	if err := req.Write(conn); err != nil {
		conn.Close()
		return nil, nil, err
	}
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	// 101: the engine switched protocols; 200: an older engine that
	// streams on the same connection without saying so.
	if resp.StatusCode != http.StatusSwitchingProtocols && resp.StatusCode != http.StatusOK {
		err := readAPIError(resp)
		conn.Close()
		return nil, nil, err
	}
	if !stop() {
		conn.Close()
		return nil, nil, ctx.Err()
	}
	return conn, br, nil
}

// attached is the control stream over an attach connection: what we
// write is the box's stdin as is; what we read is the box's stdout,
// demultiplexed from the engine's 8-byte frame headers (no tty: byte 0
// the stream, 1 stdout, 2 stderr, 3 the engine's own error; bytes 4-7
// the big-endian length). The box's stderr (the watcher's logs) goes to
// stderr. The demultiplexing runs in Read itself: no goroutine, no copy.
type attached struct {
	conn   net.Conn
	r      *bufio.Reader
	stderr io.Writer

	left int // bytes of the current stdout frame not yet read
	hdr  [8]byte

	mu     sync.Mutex
	killed bool
	done   chan struct{}
	once   sync.Once
}

func newAttached(conn net.Conn, r *bufio.Reader, stderr io.Writer) *attached {
	return &attached{conn: conn, r: r, stderr: stderr, done: make(chan struct{})}
}

func (a *attached) ended() { a.once.Do(func() { close(a.done) }) }

func (a *attached) Read(p []byte) (int, error) {
	n, err := a.read(p)
	if err != nil {
		a.ended()
		a.mu.Lock()
		killed := a.killed
		a.mu.Unlock()
		if killed {
			// We dropped the connection ourselves: the stream ended.
			err = io.EOF
		}
	}
	return n, err
}

func (a *attached) read(p []byte) (int, error) {
	for a.left == 0 {
		if _, err := io.ReadFull(a.r, a.hdr[:]); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return 0, fmt.Errorf("attach stream: truncated frame header")
			}
			return 0, err
		}
		size := int64(binary.BigEndian.Uint32(a.hdr[4:]))
		switch a.hdr[0] {
		case 1:
			a.left = int(size)
		default: // stderr, and the engine's own error stream
			if _, err := io.CopyN(a.stderr, a.r, size); err != nil {
				return 0, noEOF(err)
			}
		}
	}
	if len(p) > a.left {
		p = p[:a.left]
	}
	n, err := a.r.Read(p)
	a.left -= n
	if err != nil && a.left > 0 {
		err = noEOF(err)
	}
	return n, err
}

// noEOF turns the end of the stream inside a frame into an error.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

func (a *attached) Write(p []byte) (int, error) { return a.conn.Write(p) }

// Close ends our half: the engine closes the box's stdin (the box is
// created with StdinOnce), the watcher sees EOF; its last frames can
// still be read.
func (a *attached) Close() error {
	if cw, ok := a.conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return a.conn.Close()
}

// CloseRead releases the connection.
func (a *attached) CloseRead() error {
	a.kill()
	return nil
}

// kill drops the connection whole.
func (a *attached) kill() {
	a.mu.Lock()
	a.killed = true
	a.mu.Unlock()
	a.conn.Close()
	a.ended()
}

// wait returns once the engine ended the stream (the box's init
// exited) or we dropped it.
func (a *attached) wait() error {
	<-a.done
	return nil
}
