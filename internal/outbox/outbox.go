// Package outbox publishes domain events exactly when their change commits: an event is a
// row written in the same transaction as the change (so a rolled-back change publishes
// nothing and a committed one cannot lose its event), and the Relay publishes pending rows
// to Kafka afterwards, carrying the request id as a header. Delivery is at least once; every
// event carries a unique event_id so consumers deduplicate by it.
package outbox

import (
	"context"
	"encoding/json"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/platform/clock"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/requestid"
)

// Message is a row of the outbox table.
type Message struct {
	ID          int64
	Topic       string
	MsgKey      string
	Payload     []byte
	RequestID   string
	Attempts    int
	CreatedAt   time.Time
	PublishedAt *time.Time
}

// TableName is the table of Message.
func (Message) TableName() string { return "outbox" }

// Writer adds events to the outbox.
type Writer struct {
	ids *ids.Generator
}

// NewWriter returns an outbox writer.
func NewWriter(gen *ids.Generator) *Writer { return &Writer{ids: gen} }

// Add writes an event for topic and key in tx, the transaction of the change it announces.
// The event's payload is build(eventID) marshalled to JSON, so that the payload can name its
// own event_id.
func (w *Writer) Add(ctx context.Context, tx *gorm.DB, topic, key string, build func(eventID int64) any) error {
	msg, err := w.Event(ctx, topic, key, build)
	if err != nil {
		return err
	}
	return tx.WithContext(ctx).Create(msg).Error
}

// Event returns the outbox row of an event without writing it, for a caller that inserts it
// with its other new rows in one round trip (see database.Insert).
func (w *Writer) Event(ctx context.Context, topic, key string, build func(eventID int64) any) (*Message, error) {
	id := w.ids.Next()
	payload, err := json.Marshal(build(id))
	if err != nil {
		return nil, err
	}
	return &Message{ID: id, Topic: topic, MsgKey: key, Payload: payload, RequestID: requestid.From(ctx), CreatedAt: clock.Now()}, nil
}
