package outbox_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/ids"
	kafkax "github.com/oncepay/oncepay/internal/platform/kafka"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// TestMain lets this test binary serve as the broker process of TestRelayAcrossABrokerKill.
func TestMain(m *testing.M) {
	testenv.ServeKafkaChild()
	os.Exit(m.Run())
}

// TestRelayAcrossABrokerKill runs a relay against a broker in a process of its own, which is
// killed -9 mid-way and started again on its port and data directory. While the broker is dead
// the relay's publishes fail, past the producer's own retries, and the rows written meanwhile
// stay unpublished, their failed attempts counted (never marked sent without the broker's
// acknowledgement); once it is back the same relay, with the same
// producer, publishes them by itself, and every event, from before the kill and after, is in
// order.events under its event_id.
func TestRelayAcrossABrokerKill(t *testing.T) {
	db := testenv.DB(t)
	gen, err := ids.New(9)
	if err != nil {
		t.Fatal(err)
	}
	events := outbox.NewWriter(gen)
	broker := testenv.StartKafkaProcess(t)
	producer := broker.Cluster.Writer()
	defer producer.Close()
	relay := outbox.NewRelay(db, producer, noLock)
	relay.Interval = 50 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	stopped := make(chan struct{})
	runCtx, stop := context.WithCancel(ctx)
	go func() { _ = relay.Run(runCtx); close(stopped) }()
	defer func() { stop(); <-stopped }()

	add := func(n int) []int64 {
		var out []int64
		for i := range n {
			m, err := events.Event(ctx, kafkax.TopicOrderEvents, "order-"+strconv.Itoa(i), func(id int64) any {
				return map[string]any{"event_id": strconv.FormatInt(id, 10), "n": i}
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Create(m).Error; err != nil {
				t.Fatal(err)
			}
			out = append(out, m.ID)
		}
		return out
	}
	unpublished := func(ids []int64) int64 {
		var n int64
		if err := db.Model(&outbox.Message{}).Where("id IN ? AND published_at IS NULL", ids).Count(&n).Error; err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitPublished := func(what string, ids []int64, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for unpublished(ids) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d of %d rows still unpublished after %s", what, unpublished(ids), len(ids), within)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	before := add(10)
	waitPublished("before the kill", before, 20*time.Second)

	broker.Kill()
	killed := time.Now()
	during := add(10)
	// The producer retries a failed write by itself for a few seconds (kafka-go's Writer,
	// MaxAttempts); the relay counts a publish that failed for good in the rows' attempts.
	for {
		var failed int64
		if err := db.Model(&outbox.Message{}).Where("id IN ? AND attempts > 0", during).Count(&failed).Error; err != nil {
			t.Fatal(err)
		}
		if failed > 0 {
			break
		}
		if time.Since(killed) > 30*time.Second {
			t.Fatal("no publish failed within 30 s of the broker's death")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the first publish failed for good %s after the kill", time.Since(killed).Round(time.Millisecond))
	if n := unpublished(during); n != int64(len(during)) {
		t.Fatalf("%d rows written while the broker was dead are marked published", int64(len(during))-n)
	}

	restarted := time.Now()
	broker.Start()
	waitPublished("after the restart", during, 30*time.Second)
	t.Logf("the rows written during the outage were published %s after the broker's restart", time.Since(restarted).Round(time.Millisecond))

	// Every event is in the topic: the broker kept those it acknowledged before the kill.
	want := map[string]bool{}
	for _, id := range append(before, during...) {
		want[strconv.FormatInt(id, 10)] = true
	}
	r := broker.Cluster.Reader("relay-kill-check", kafkax.TopicOrderEvents)
	defer r.Close()
	for len(want) > 0 {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("read order.events: %v; %d events not found: %v", err, len(want), want)
		}
		for _, h := range m.Headers {
			if h.Key == "event_id" {
				delete(want, string(h.Value))
			}
		}
	}
}
