package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// lineWriter hands each line the program prints to a channel.
type lineWriter struct {
	mu    sync.Mutex
	buf   strings.Builder
	lines chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		s := w.buf.String()
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.lines <- s[:i]
		w.buf.Reset()
		w.buf.WriteString(s[i+1:])
	}
}

// start runs the receiver with args and returns the first line it printed, or the error it
// returned before printing one.
func start(t *testing.T, args ...string) (line string, err error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &lineWriter{lines: make(chan string, 4)}
	done := make(chan error, 1)
	args = append([]string{"-db", filepath.Join(t.TempDir(), "r.db")}, args...)
	go func() { done <- run(ctx, args, secret, out) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the receiver did not stop within 10s of its context ending")
		}
	})
	select {
	case line := <-out.lines:
		return line, nil
	case err := <-done:
		done <- err // for the cleanup
		return "", err
	case <-time.After(30 * time.Second):
		t.Fatal("the receiver printed nothing and did not return within 30s")
		return "", nil
	}
}

var listening = regexp.MustCompile(`^webhook receiver on http://(127\.0\.0\.1:\d+)/webhooks \(dedup true\)$`)

// TestPrintsOnlyOnceBound: the line that says where the receiver listens comes after the
// bind, so a client that reads it can connect at once; with port 0 it names the port it got.
func TestPrintsOnlyOnceBound(t *testing.T) {
	line, err := start(t, "-addr", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := listening.FindStringSubmatch(line)
	if m == nil || strings.HasSuffix(m[1], ":0") {
		t.Fatalf("first line %q does not name the bound address", line)
	}
	resp, err := http.Get("http://" + m[1] + "/shipments")
	if err != nil {
		t.Fatalf("the printed address refuses connections: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != `{"shipments":[]}` {
		t.Fatalf("GET /shipments = %d %s", resp.StatusCode, body)
	}
}

// TestBusyPortSaysSo: a second receiver on a port already taken prints nothing that claims
// it listens, and says what to do instead of a bare "bind: address already in use".
func TestBusyPortSaysSo(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	line, err := start(t, "-addr", taken.Addr().String())
	if err == nil {
		t.Fatalf("a receiver started on a busy port and printed %q", line)
	}
	for _, want := range []string{taken.Addr().String(), "already in use", "-addr 127.0.0.1:0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
