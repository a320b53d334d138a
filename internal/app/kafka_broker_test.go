package app_test

import (
	"context"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// TestMain lets this test binary serve as the broker process of TestKafkaBrokerKilled.
func TestMain(m *testing.M) {
	testenv.ServeKafkaChild()
	os.Exit(m.Run())
}

// TestKafkaBrokerKilled runs an instance on a broker in a process of its own, which is killed
// -9 and started again on its port and data directory. /readyz says at once that the broker is
// gone (its kafka check asks the broker, not cached metadata: internal/platform/kafka,
// Cluster.Ping) and ready again once it is back; the consumer rejoins its group by itself and
// resumes from its committed offsets: the notifications published after the restart are
// applied, those applied before it and published again are duplicates, and every order is paid
// once, by one payment; the outbox is drained by the same relay.
func TestKafkaBrokerKilled(t *testing.T) {
	broker := testenv.StartKafkaProcess(t)
	d := apptest.NewDeps(t)
	d.Kafka = broker.Cluster
	s := apptest.StartOn(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	var orders []order.View
	for range 6 {
		orders = append(orders, s.CreateOrder(t, apptest.AliceKey, "kbroker-"+apptest.RandHex(6), apptest.Item{SKU: "SKU-1002", Quantity: 1}))
	}
	// The channel's producer, with connections of its own.
	w := broker.Cluster.Writer()
	t.Cleanup(func() { _ = w.Close() })
	publish := func(o order.View) {
		t.Helper()
		body := apptest.JSON(apptest.Notification(o, s.Config.ChannelName, "T-KBROKER-"+o.OrderID))
		for range 2 {
			if err := apptest.PublishNotification(ctx, w, body); err != nil {
				t.Fatalf("publish the notification of order %s: %v", o.OrderID, err)
			}
		}
	}
	for _, o := range orders[:3] {
		publish(o)
	}
	s.WaitConsumed(t)

	readyz := func() apptest.Response { return s.Do(http.MethodGet, "/readyz", "", nil, nil) }
	broker.Kill()
	killed := time.Now()
	apptest.Eventually(t, 2*time.Second, "/readyz not ready with the broker dead", func() (bool, string) {
		r := readyz()
		return r.Status == http.StatusServiceUnavailable, r.String()
	})
	t.Logf("/readyz answered 503 %s after the kill", time.Since(killed).Round(time.Millisecond))
	time.Sleep(time.Second)

	broker.Start()
	restarted := time.Now()
	apptest.Eventually(t, 30*time.Second, "/readyz ready with the broker back", func() (bool, string) {
		r := readyz()
		return r.Status == http.StatusOK, r.String()
	})
	t.Logf("/readyz answered 200 %s after the restart", time.Since(restarted).Round(time.Millisecond))

	// The last three orders' notifications for the first time, the first three's again.
	for _, o := range orders {
		publish(o)
	}
	s.WaitConsumed(t)
	t.Logf("every notification consumed %s after the restart", time.Since(restarted).Round(time.Millisecond))
	for _, o := range orders {
		if got := s.Order(t, o.OrderID).Status; got != order.Paid {
			t.Errorf("order %s is %s, want PAID", o.OrderID, got)
		}
		if n := s.Count(t, "payments", "order_id = ?", o.OrderID); n != 1 {
			t.Errorf("order %s has %d payments, want 1", o.OrderID, n)
		}
	}
	if n := s.Count(t, "anomalies", ""); n != 0 {
		t.Errorf("%d anomalies, want none", n)
	}
	s.WaitOutboxPublished(t)
}
