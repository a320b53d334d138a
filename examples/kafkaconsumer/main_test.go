package main

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/idemtest"
)

// TestEachPaymentOnce: on every dialect, five copies of one payment and three of another on
// the topic — a producer's retries, a redelivery — write two ledger entries, and two consumers
// of the group, restarted halfway, write no more.
func TestEachPaymentOnce(t *testing.T) {
	for _, dialect := range idemtest.Dialects(t) {
		t.Run(dialect, func(t *testing.T) {
			cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "payments"))
			if err != nil {
				t.Fatal(err)
			}
			defer cluster.Close()
			brokers := cluster.ListenAddrs()
			db := idemtest.DB(t, dialect)
			if err := db.AutoMigrate(&Entry{}); err != nil {
				t.Fatal(err)
			}
			w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: "payments", BatchSize: 1}
			defer w.Close()
			for i := range 8 {
				value := `{"PaymentID":"P1","Amount":100}`
				if i%2 == 1 && i < 6 {
					value = `{"PaymentID":"P2","Amount":250}`
				}
				if err := w.WriteMessages(context.Background(), kafka.Message{Value: []byte(value)}); err != nil {
					t.Fatal(err)
				}
			}
			rdb := idemtest.Redis(t)
			// consume runs a consumer of the group until it has fetched want messages.
			consume := func(want int64) {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, GroupID: "ledger", Topic: "payments", MaxWait: 100 * time.Millisecond})
				defer r.Close()
				done := make(chan struct{})
				var fetched atomic.Int64
				go func() {
					defer close(done)
					_ = Consume(ctx, &counting{Reader: r, n: &fetched}, idempotent.New(db, rdb, idempotent.Config{}))
				}()
				for ctx.Err() == nil && fetched.Load() < want {
					time.Sleep(50 * time.Millisecond)
				}
				time.Sleep(200 * time.Millisecond) // the last commit
				cancel()
				<-done
			}
			consume(8)
			// The topic delivers P1 again — a producer's retry after a lost ack — to another
			// consumer of the group.
			for range 3 {
				if err := w.WriteMessages(context.Background(), kafka.Message{Value: []byte(`{"PaymentID":"P1","Amount":100}`)}); err != nil {
					t.Fatal(err)
				}
			}
			consume(3)
			var entries []Entry
			db.Order("payment_id").Find(&entries)
			if len(entries) != 2 || entries[0].Amount != 100 || entries[1].Amount != 250 {
				t.Errorf("ledger %+v, want P1 100 and P2 250, once each", entries)
			}
		})
	}
}

// counting is a reader that counts the messages it fetched.
type counting struct {
	*kafka.Reader
	n *atomic.Int64
}

func (c *counting) FetchMessage(ctx context.Context) (kafka.Message, error) {
	m, err := c.Reader.FetchMessage(ctx)
	if err == nil {
		c.n.Add(1)
	}
	return m, err
}
