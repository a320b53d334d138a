// Command kafkaconsumer is the kit guarding a Kafka consumer: a message is processed once per
// business key, however often the topic redelivers it (a rebalance, a crash before the commit,
// a producer's retry). A Redis marker answers most copies at once (Guard.Message); the dedup
// record, in the transaction of the effect, decides the rest.
//
//	go run ./kafkaconsumer -brokers 127.0.0.1:9092 -db ledger.db -redis 127.0.0.1:6379
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"log"
	"os/signal"
	"syscall"
	"time"

	"github.com/glebarez/sqlite"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
)

// Entry is a ledger row: one per payment, by the kit alone (payment_id is not unique here).
type Entry struct {
	ID        int64
	PaymentID string
	Amount    int64
}

func main() {
	brokers, file := flag.String("brokers", "127.0.0.1:9092", "Kafka"), flag.String("db", "ledger.db", "SQLite file")
	addr := flag.String("redis", "127.0.0.1:6379", "Redis")
	flag.Parse()
	db, err := gorm.Open(sqlite.Open(*file), &gorm.Config{})
	if err == nil {
		err = errors.Join(db.AutoMigrate(&Entry{}), idempotent.CreateSchema(db))
	}
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{*brokers}, GroupID: "ledger", Topic: "payments"})
	defer r.Close()
	log.Print(Consume(ctx, r, idempotent.New(db, redis.NewClient(&redis.Options{Addr: *addr}), idempotent.Config{})))
}

// Reader is what Consume needs of a *kafka.Reader.
type Reader interface {
	FetchMessage(ctx context.Context) (kafka.Message, error)
	CommitMessages(ctx context.Context, msgs ...kafka.Message) error
}

// Consume applies each message of r once, then commits it. A message whose work fails is
// retried in place, never skipped: committing a later offset would commit past it.
func Consume(ctx context.Context, r Reader, g *idempotent.Guard) error {
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			return err
		}
		for err = apply(ctx, g, m); err != nil && ctx.Err() == nil; err = apply(ctx, g, m) {
			log.Printf("offset %d: %v (again in a second)", m.Offset, err)
			time.Sleep(time.Second)
		}
		if err := r.CommitMessages(ctx, m); err != nil {
			return err
		}
	}
}

// apply writes m's ledger entry once per payment id; a message that is not one is dropped
// (a real consumer dead-letters it), and the same id with another body is refused, not applied.
func apply(ctx context.Context, g *idempotent.Guard, m kafka.Message) error {
	var e Entry
	if json.Unmarshal(m.Value, &e) != nil || e.PaymentID == "" {
		return nil
	}
	req := idempotent.Request{Key: idempotent.Key{Scope: "topic:payments", BizType: "payment", BizKey: e.PaymentID},
		Fingerprint: idempotent.Fingerprint("KAFKA", "payments", m.Value), Via: "kafka"}
	_, err := g.Message(ctx, req, idempotent.Respond(func(_ context.Context, tx *gorm.DB) (idempotent.Response, error) {
		return idempotent.Response{Status: 200}, tx.Create(&e).Error
	}))
	if errors.Is(err, idempotent.ErrKeyReused) {
		return nil
	}
	return err
}
