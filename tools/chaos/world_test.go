package chaos

import (
	"context"
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestWaitForRetriesUntilReady: waitFor probes a server that starts listening only after a
// while, again every 100 ms, and returns nil once it answers; a server that never starts is
// given up on after d, with the probe's last error.
func TestWaitForRetriesUntilReady(t *testing.T) {
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	probes := 0
	probe := func(ctx context.Context) error {
		probes++
		c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
		if err == nil {
			_ = c.Close()
		}
		return err
	}

	t.Run("gives up", func(t *testing.T) {
		probes = 0
		start := time.Now()
		err := waitFor(context.Background(), 500*time.Millisecond, probe)
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("waitFor with nothing listening: %v, want the probe's connection refused", err)
		}
		if took := time.Since(start); took < 500*time.Millisecond || took > 2*time.Second {
			t.Errorf("gave up after %s, want about 500ms", took)
		}
		if probes < 4 {
			t.Errorf("%d probes in 500ms, want one every 100ms", probes)
		}
	})

	t.Run("starts late", func(t *testing.T) {
		probes = 0
		listening := make(chan net.Listener, 1)
		go func() {
			time.Sleep(400 * time.Millisecond)
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				t.Errorf("listen on %s: %v", addr, err)
			}
			listening <- ln
		}()
		err := waitFor(context.Background(), 10*time.Second, probe)
		if ln := <-listening; ln != nil {
			_ = ln.Close()
		}
		if err != nil {
			t.Fatalf("waitFor: %v, want nil once the server listens", err)
		}
		if probes < 2 {
			t.Errorf("%d probes, want the refused ones and the one that connected", probes)
		}
	})
}
