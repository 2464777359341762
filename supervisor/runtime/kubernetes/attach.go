package kubernetes

// The streams: the control stream rides an exec session of the relay
// (RelayCommand) through the API server's exec subresource over
// WebSocket; the attach (the container's own stdin and stdout) uses the
// same channels
// (the channel protocol v5.channel.k8s.io, v4 accepted): every binary
// message starts with a channel byte, 0 stdin, 1 stdout, 2 stderr,
// 3 the status at the end, 255 close (v5: closes the channel named by
// the next byte). With stdinOnce the container's stdin reaches EOF
// when the first attach ends: a killed supervisor's TCP connection is
// the watcher's EOF; a partitioned one's is the heartbeat's silence.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// The channel bytes.
const (
	chanStdin  = 0
	chanStdout = 1
	chanStderr = 2
	chanStatus = 3
	chanClose  = 255
)

// Subprotocols the attach asks for, preferred first.
var Subprotocols = []string{"v5.channel.k8s.io", "v4.channel.k8s.io"}

// AttachURL is the WebSocket URL of the attach to container c of pod
// ns/name on server (https → wss).
func AttachURL(server, ns, name, c string) string {
	u := strings.Replace(server, "https://", "wss://", 1)
	u = strings.Replace(u, "http://", "ws://", 1) // the tests' fake server
	return u + podsPath(ns) + "/" + url.PathEscape(name) + "/attach?" + AttachQuery(c).Encode()
}

// ExecURL is the WebSocket URL of an exec of argv in container c of pod
// ns/name on server.
func ExecURL(server, ns, name, c string, argv []string) string {
	u := strings.Replace(server, "https://", "wss://", 1)
	u = strings.Replace(u, "http://", "ws://", 1)
	return u + podsPath(ns) + "/" + url.PathEscape(name) + "/exec?" + ExecQuery(c, argv).Encode()
}

// execAttempts bounds the exec's tries: a loaded node's container
// runtime can fail to start an exec (a 5xx, or a dial that fails) where
// the next try works.
const execAttempts = 4

// Exec runs argv in container c of pod ns/name as a stream: Read its
// stdout, Write its stdin; stderr gets its stderr. A failure to start it
// that the server reports as its own (5xx) or a failed dial is tried
// again, up to execAttempts times.
func (k *Client) Exec(ctx context.Context, ns, name, c string, argv []string, stderr io.Writer, log func(msg string, args ...any)) (*Stream, error) {
	var err error
	wait := 50 * time.Millisecond
	for try := 1; ; try++ {
		var s *Stream
		var status int
		s, status, err = k.stream(ctx, "exec in", ExecURL(k.c.Server, ns, name, c, argv), ns, name, stderr)
		if err == nil || try == execAttempts || (status != 0 && status < 500) || ctx.Err() != nil {
			return s, err
		}
		if log != nil {
			log("kubernetes: exec failed to start; trying again", "pod", ns+"/"+name, "try", try, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
		wait *= 2
	}
}

// Attach opens the attach to container c of pod ns/name; stderr gets
// the container's stderr (the watcher's own log lines).
func (k *Client) Attach(ctx context.Context, ns, name, c string, stderr io.Writer) (*Stream, error) {
	s, _, err := k.stream(ctx, "attach to", AttachURL(k.c.Server, ns, name, c), ns, name, stderr)
	return s, err
}

// stream opens the WebSocket at u (an attach or an exec: what, said in
// errors) to pod ns/name; with an error comes the HTTP status, 0 when
// there was none.
func (k *Client) stream(ctx context.Context, what, u, ns, name string, stderr io.Writer) (*Stream, int, error) {
	// A TLS configuration of its own: the HTTP client's has learnt to
	// offer h2, which a WebSocket upgrade cannot use.
	tc, err := k.c.TLS(k.auth)
	if err != nil {
		return nil, 0, err
	}
	d := websocket.Dialer{TLSClientConfig: tc, Subprotocols: Subprotocols, HandshakeTimeout: k.http.Timeout, Proxy: k.proxy}
	h := http.Header{}
	tok, err := k.auth.authHeaders(ctx, h)
	if err != nil {
		return nil, 0, fmt.Errorf("%s pod %s/%s: %w", what, ns, name, err)
	}
	ws, resp, err := d.DialContext(ctx, u, h)
	if err != nil {
		if resp != nil {
			defer resp.Body.Close()
			if resp.StatusCode == http.StatusUnauthorized {
				k.auth.refused(tok)
			}
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			return nil, resp.StatusCode, fmt.Errorf("%s pod %s/%s: %w: %s", what, ns, name, err, strings.TrimSpace(string(b)))
		}
		return nil, 0, fmt.Errorf("%s pod %s/%s: %w", what, ns, name, err)
	}
	pr, pw := io.Pipe()
	s := &Stream{ws: ws, v5: ws.Subprotocol() == Subprotocols[0], r: pr, done: make(chan struct{})}
	go s.readLoop(pw, stderr)
	return s, 0, nil
}

// Stream is an open attach: Read the container's stdout, Write its
// stdin. It is the runtime's supervisor.Started.Control.
type Stream struct {
	ws   *websocket.Conn
	v5   bool
	wmu  sync.Mutex
	r    *io.PipeReader
	done chan struct{}
	err  error // the status the server sent on channel 3, or the read error
}

func (s *Stream) readLoop(stdout *io.PipeWriter, stderr io.Writer) {
	defer close(s.done)
	for {
		typ, msg, err := s.ws.ReadMessage()
		if err != nil {
			if !websocket.IsCloseError(err, websocket.CloseNormalClosure) && s.err == nil {
				s.err = err
			}
			stdout.CloseWithError(io.EOF)
			return
		}
		if typ != websocket.BinaryMessage || len(msg) < 2 {
			// Text, or a channel byte alone (the server's "stream
			// ready" message): nothing to relay.
			continue
		}
		switch msg[0] {
		case chanStdout:
			if _, err := stdout.Write(msg[1:]); err != nil {
				// Our reader is gone (CloseRead): drain no more.
				s.ws.Close()
			}
		case chanStderr:
			if stderr != nil {
				stderr.Write(msg[1:])
			}
		case chanStatus:
			var st struct {
				Status  string `json:"status"`
				Message string `json:"message"`
			}
			if json.Unmarshal(msg[1:], &st) == nil && st.Status == "Failure" {
				s.err = fmt.Errorf("attach: %s", st.Message)
			}
		}
	}
}

// Read reads the container's stdout.
func (s *Stream) Read(p []byte) (int, error) { return s.r.Read(p) }

// stdinMessage bounds the stdin bytes of one message: a message that
// gorilla/websocket writes as more than one frame (past its 4 KiB write
// buffer) reaches the container's stdin corrupted by the cluster's
// stream relay, so every message fits in one frame.
const stdinMessage = 2048

// Write writes p to the container's stdin, in messages of at most
// stdinMessage bytes each.
func (s *Stream) Write(p []byte) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	msg := make([]byte, 1+min(len(p), stdinMessage))
	msg[0] = chanStdin
	n := 0
	for n < len(p) {
		k := copy(msg[1:], p[n:])
		if err := s.ws.WriteMessage(websocket.BinaryMessage, msg[:1+k]); err != nil {
			return n, err
		}
		n += k
	}
	return n, nil
}

// Close ends the container's stdin (the watcher sees EOF): v5 closes
// the stdin channel and keeps stdout to its end; v4 cannot, so it ends
// the attach.
func (s *Stream) Close() error {
	if !s.v5 {
		return s.ws.Close()
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.ws.WriteMessage(websocket.BinaryMessage, []byte{chanClose, chanStdin}); err != nil {
		return s.ws.Close()
	}
	return nil
}

// CloseWrite ends the container's stdin and keeps stdout to its end
// (v5); v4 cannot end one half alone, so it leaves the stream as it is.
func (s *Stream) CloseWrite() error {
	if !s.v5 {
		return nil
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.ws.WriteMessage(websocket.BinaryMessage, []byte{chanClose, chanStdin})
}

// CloseRead releases the stdout end.
func (s *Stream) CloseRead() error { return s.r.Close() }

// Wait returns when the attach has ended, with the server's failure
// status if it sent one.
func (s *Stream) Wait() error {
	<-s.done
	return s.err
}

// Kill ends the attach at once, and the relay of its stdout with it
// (a relay blocked on a reader that is gone).
func (s *Stream) Kill() {
	s.ws.Close()
	s.r.CloseWithError(io.ErrClosedPipe)
}
