package chaos

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	okafka "github.com/oncepay/oncepay/internal/platform/kafka"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// newTestHistory returns a history written under the test's temporary directory.
func newTestHistory(t *testing.T) *history {
	t.Helper()
	h, err := newHistory(filepath.Join(t.TempDir(), "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.close() })
	return h
}

// lines renders events one per line, for a failure's message.
func lines(events []*event) string {
	var b strings.Builder
	for _, e := range events {
		b.WriteString("\n\t" + e.line())
	}
	return b.String()
}

// TestSettleRetriesUntilFinal: a notification whose key is held by another copy is answered
// 409 in_progress; settle sends it again, after a growing pause, until an answer is final. The
// instance is a real one whose payments hold their key for hold (apptest.SlowTrades).
func TestSettleRetriesUntilFinal(t *testing.T) {
	const hold = 1500 * time.Millisecond
	s := apptest.StartOn(t, apptest.SlowTrades(apptest.NewDeps(t), hold))
	o := s.CreateOrder(t, apptest.AliceKey, "settle-"+apptest.RandHex(4), apptest.Item{SKU: "SKU-1001", Quantity: 1})
	tradeNo := "T-SETTLE-" + o.OrderID
	body := apptest.JSON(apptest.Notification(o, "alipay", tradeNo))
	holder := make(chan apptest.Response, 1)
	go func() { holder <- s.SignedNotify(body) }()
	time.Sleep(300 * time.Millisecond) // the holder has taken the key, inside its delay

	wl := &workload{
		w: &world{insts: []*instance{{n: 1, base: s.URL}}}, h: newTestHistory(t), secret: s.Config.ChannelSecret,
		http: &http.Client{Timeout: clientTimeout},
	}
	start := time.Now()
	e := wl.settle(context.Background(), call{op: "notify", key: tradeNo, method: http.MethodPost, path: "/v1/payments/notify",
		signed: true, body: body}, 1)
	if r := <-holder; r.Status != http.StatusOK {
		t.Fatalf("the holder's copy: %s, want 200", r)
	}
	if e == nil || e.Status != http.StatusOK {
		t.Fatalf("settle returned %+v, want the final 200", e)
	}
	events := wl.h.snapshot()
	if len(events) < 2 || events[0].Status != http.StatusConflict || events[0].Outcome != "in_progress" {
		t.Fatalf("deliveries %s: want a 409 in_progress first, then the copies settle sent again", lines(events))
	}
	// The pauses are at least 100, 200, 400 … ms: settle waited out most of the hold with a
	// handful of copies, not hundreds.
	if len(events) > 6 {
		t.Errorf("%d deliveries within %s: the pauses between them did not grow: %s", len(events), time.Since(start).Round(time.Millisecond), lines(events))
	}
	if got := s.Order(t, o.OrderID); got.Status != "PAID" {
		t.Errorf("order %s, want PAID", got.Status)
	}
}

// produceFaults breaks a producer's first fails produce requests: the connection that carries
// one is closed before the request reaches the broker, as a broker that restarts or a network
// that drops does. Every other request (metadata, API versions) goes through.
type produceFaults struct {
	mu    sync.Mutex
	fails int
	// broken counts the produce requests broken so far.
	broken int
}

// take reports whether the next produce request is to be broken, and counts it.
func (f *produceFaults) take() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fails == 0 {
		return false
	}
	f.fails--
	f.broken++
	return true
}

func (f *produceFaults) breaks() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.broken
}

func (f *produceFaults) dial(ctx context.Context, network, address string) (net.Conn, error) {
	c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return &faultyConn{Conn: c, faults: f}, nil
}

// apiKeyProduce is the Kafka protocol's api key of a produce request.
const apiKeyProduce = 0

// faultyConn is a connection to the broker that closes itself instead of sending a produce
// request its faults break. Each Kafka request is a frame: a 4-byte size, then a 2-byte api
// key; kafka-go writes a frame from its start in one Write, so the first Write of each frame
// holds both.
type faultyConn struct {
	net.Conn
	faults *produceFaults
	// left is how many bytes of the current frame are still to be written.
	left int
}

func (c *faultyConn) Write(p []byte) (int, error) {
	if c.left == 0 && len(p) >= 6 {
		c.left = 4 + int(binary.BigEndian.Uint32(p[:4]))
		if int16(binary.BigEndian.Uint16(p[4:6])) == apiKeyProduce && c.faults.take() {
			_ = c.Conn.Close()
			return 0, errors.New("produceFaults: the connection dropped a produce request")
		}
	}
	n, err := c.Conn.Write(p)
	c.left = max(0, c.left-n)
	return n, err
}

// sendWorkload returns a workload whose producer writes to the broker through faults, giving
// up on a write at its first failure, so that every retry is send's own.
func sendWorkload(t *testing.T, faults *produceFaults) (*workload, *okafka.Cluster) {
	t.Helper()
	k := testenv.Kafka(t)
	w := &kafka.Writer{
		Addr: kafka.TCP(k.Brokers...), Topic: okafka.TopicPaymentNotifications, Balancer: &kafka.Hash{},
		BatchTimeout: 5 * time.Millisecond, RequiredAcks: kafka.RequireAll, MaxAttempts: 1,
		Transport: &kafka.Transport{Dial: faults.dial},
	}
	t.Cleanup(func() { _ = w.Close() })
	return &workload{h: newTestHistory(t), kafka: w}, k
}

// published counts the messages on the payment notifications topic.
func published(t *testing.T, k *okafka.Cluster) int64 {
	t.Helper()
	var total int64
	for p := range okafka.Partitions {
		c, err := kafka.DialLeader(context.Background(), "tcp", k.Brokers[0], okafka.TopicPaymentNotifications, p)
		if err != nil {
			t.Fatalf("dial partition %d: %v", p, err)
		}
		first, last, err := c.ReadOffsets()
		_ = c.Close()
		if err != nil {
			t.Fatalf("offsets of partition %d: %v", p, err)
		}
		total += last - first
	}
	return total
}

// TestSendRetriesFailedWrites: a message whose first writes fail is written by a later
// attempt, once, and recorded as published; a broker that stays unreachable is given up on
// after sendRetries retries, and the message is recorded with the last error.
func TestSendRetriesFailedWrites(t *testing.T) {
	m := kafka.Message{Key: []byte("T-SEND"), Value: []byte(`{"trade_no":"T-SEND"}`)}

	t.Run("recovers", func(t *testing.T) {
		faults := &produceFaults{fails: 2}
		wl, k := sendWorkload(t, faults)
		wl.send(context.Background(), "notify", m)
		events := wl.h.snapshot()
		if len(events) != 1 || events[0].Status != 1 || events[0].Err != "" {
			t.Fatalf("events %s, want one published message without error", lines(events))
		}
		if n := faults.breaks(); n != 2 {
			t.Errorf("%d produce requests broken, want 2", n)
		}
		if n := published(t, k); n != 1 {
			t.Errorf("%d messages on the topic, want 1", n)
		}
		if n := wl.deliveries.Load(); n != 1 {
			t.Errorf("%d deliveries counted, want 1 (one per message, whatever its attempts)", n)
		}
	})

	t.Run("gives up", func(t *testing.T) {
		faults := &produceFaults{fails: 1 << 30}
		wl, k := sendWorkload(t, faults)
		start := time.Now()
		wl.send(context.Background(), "notify", m)
		events := wl.h.snapshot()
		if len(events) != 1 || events[0].Status != 0 || events[0].Err == "" {
			t.Fatalf("events %s, want one message recorded unpublished with its error", lines(events))
		}
		if n := faults.breaks(); n != sendRetries+1 {
			t.Errorf("%d produce requests broken, want one per attempt (%d)", n, sendRetries+1)
		}
		if took := time.Since(start); took < sendRetries*sendPause {
			t.Errorf("gave up after %s, want %d pauses of %s at least", took, sendRetries, sendPause)
		}
		if n := published(t, k); n != 0 {
			t.Errorf("%d messages on the topic, want none", n)
		}
	})
}
