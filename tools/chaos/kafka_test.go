package chaos

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/oncepay/oncepay/internal/notify"
	okafka "github.com/oncepay/oncepay/internal/platform/kafka"
)

// TestMain lets the test binary serve as the run's Kafka broker and merchant receiver, as
// tools/cmd/chaos does: the world starts its own executable with BrokerCommand (kafka.go) or
// ReceiverCommand (receiverproc.go), which is this binary in tests.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == BrokerCommand {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := BrokerMain(ctx, os.Args[2:], os.Stderr)
		stop()
		os.Exit(code)
	}
	if len(os.Args) > 1 && os.Args[1] == ReceiverCommand {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := ReceiverMain(ctx, os.Args[2:], os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// brokerWorld starts the world's Kafka broker alone, as a process of its own, and a workload
// whose producer talks to it.
func brokerWorld(t *testing.T) (*world, *workload, *faulter) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w := &world{dir: t.TempDir()}
	if err := w.startKafka(ctx); err != nil {
		t.Fatalf("start the broker: %v", err)
	}
	t.Cleanup(w.stopKafka)
	h := newTestHistory(t)
	wl := &workload{w: w, h: h, secret: "chaos-test", kafka: &kafka.Writer{
		Addr: kafka.TCP(w.kafka.Brokers...), Topic: okafka.TopicPaymentNotifications, Balancer: &kafka.Hash{},
		BatchTimeout: 5 * time.Millisecond, RequiredAcks: kafka.RequireAll,
	}}
	t.Cleanup(func() { _ = wl.kafka.Close() })
	return w, wl, &faulter{w: w, h: h, wl: wl, every: time.Second, counts: map[string]int{}}
}

// consumeAll reads and commits, as the payment consumer's group, every message of
// payment.notifications until the group has no lag.
func consumeAll(t *testing.T, w *world) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := w.kafka.Reader(notify.Group, okafka.TopicPaymentNotifications)
	defer r.Close()
	for {
		lag, _, err := kafkaBacklog(ctx, w.kafka.Brokers)
		if err == nil && lag == 0 {
			return
		}
		fctx, fcancel := context.WithTimeout(ctx, 2*time.Second)
		m, err := r.FetchMessage(fctx)
		fcancel()
		if ctx.Err() != nil {
			t.Fatalf("the group still lags %d messages: %v", lag, err)
		}
		if err == nil {
			if err := r.CommitMessages(ctx, m); err != nil {
				t.Logf("commit %d/%d: %v", m.Partition, m.Offset, err)
			}
		}
	}
}

// TestKillKafkaKeepsWhatItAcknowledged runs the kill_kafka fault on a real broker process under a
// producer: every notification it acknowledged before the kill -9, and after, is in the topic
// once it is back, and so is the consumer group's committed offset. Then a broker that comes
// back without its data (the directory deleted between the kill and the start) shows what the
// checker says of a broker that loses what it acknowledged: kafka_keeps_acknowledged names every
// notification it lost.
func TestKillKafkaKeepsWhatItAcknowledged(t *testing.T) {
	w, wl, f := brokerWorld(t)
	ctx := context.Background()
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			trade := fmt.Sprintf("T-KAFKA-%03d", i)
			wl.publish(ctx, trade, []byte(fmt.Sprintf(`{"trade_no":%q,"amount":%d}`, trade, 100+i)))
		}
	}
	publish(0, 40)
	consumeAll(t, w)
	f.inject(ctx, faultKillKafka)
	publish(40, 80)

	events := wl.h.snapshot()
	var healed *event
	for _, e := range events {
		if e.Kind == kindFault && e.Op == faultKillKafka+"_healed" {
			healed = e
		}
		if e.Kind == kindKafka && e.Status != 1 {
			t.Errorf("a publish failed for good: %s", e.line())
		}
	}
	if healed == nil || healed.Err != "" {
		t.Fatalf("kill_kafka did not heal: %+v", healed)
	}
	t.Logf("%s", healed.Detail)

	lag, _, err := kafkaBacklog(ctx, w.kafka.Brokers)
	if err != nil {
		t.Fatal(err)
	}
	if lag != 40 {
		t.Errorf("after the restart the group lags %d messages, want the 40 published since: its commits before the kill are kept", lag)
	}
	view, err := readKafka(ctx, w.kafka.Brokers)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(view.topics[okafka.TopicPaymentNotifications]); n != 80 {
		t.Errorf("%s holds %d messages after the restart, want 80", okafka.TopicPaymentNotifications, n)
	}
	c := &checker{events: wl.h.snapshot(), kafka: view}
	c.checkKafkaKept()
	for _, v := range c.violations {
		t.Errorf("violation after a kill -9 of the broker: %s: %s", v.Check, v.Detail)
	}

	// The broken broker: killed, its data gone, started again empty.
	w.broker.kill()
	if err := os.RemoveAll(filepath.Join(w.dir, "kafka")); err != nil {
		t.Fatal(err)
	}
	if err := w.broker.start(ctx); err != nil {
		t.Fatal(err)
	}
	view, err = readKafka(ctx, w.kafka.Brokers)
	if err != nil {
		t.Fatal(err)
	}
	c = &checker{events: wl.h.snapshot(), kafka: view}
	c.checkKafkaKept()
	expectOnly(t, c, "kafka_keeps_acknowledged", 80)
	expectDetail(t, c, "kafka_keeps_acknowledged", "T-KAFKA-007", "acknowledged 1 copies", "holds 0: lost")
}
