// Package outbox publishes domain events exactly when their change commits: an event is a
// row written in the same transaction as the change (so a rolled-back change publishes
// nothing and a committed one cannot lose its event), and the Relay publishes pending rows
// to Kafka afterwards, carrying the request id as a header. Delivery is at least once; every
// event carries a unique event_id so consumers deduplicate by it.
package outbox

import (
	"context"
	"encoding/json"
	"fmt"
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

// Rows returns the two rows of one change's event, not written, under one event id: the
// message for topic and key, whose payload is build(eventID), and the merchant's event typ
// about view — so that the relay's message and the webhooks' event name one fact by one id, and
// a planned write inserts both with its other new rows (database.Batch).
func (w *Writer) Rows(ctx context.Context, topic, key string, build func(eventID int64) any, typ string, view any) (*Message, *Event, error) {
	msg, err := w.Event(ctx, topic, key, build)
	if err != nil {
		return nil, nil, err
	}
	ev, err := w.Notice(ctx, msg.ID, typ, view)
	return msg, ev, err
}

// Announce writes the event typ about data — the resource as it is after the change — in tx,
// the transaction of the change.
func (w *Writer) Announce(ctx context.Context, tx *gorm.DB, typ string, data any) error {
	ev, err := w.NewEvent(ctx, typ, data)
	if err != nil {
		return err
	}
	if err := tx.WithContext(ctx).Create(ev).Error; err != nil {
		return fmt.Errorf("event %s: %w", typ, err)
	}
	return nil
}

// NewEvent returns the events row of typ about data under a new id without writing it, for a
// planned write that inserts it with its other new rows (database.Batch).
func (w *Writer) NewEvent(ctx context.Context, typ string, data any) (*Event, error) {
	return w.Notice(ctx, w.ids.Next(), typ, data)
}

// Notice returns the events row of typ about data under id without writing it, for a caller
// that inserts it with its other new rows in one round trip, or that gives the event the id of
// the change's order.events message so that both name one fact by one id.
func (w *Writer) Notice(ctx context.Context, id int64, typ string, data any) (*Event, error) {
	raw, err := json.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("event %s: %w", typ, err)
	}
	now := clock.Now().Truncate(time.Microsecond)
	payload, err := json.Marshal(Envelope{EventID: ids.Format(id), Type: typ, CreatedAt: now.Format(time.RFC3339Nano), Data: raw})
	if err != nil {
		return nil, err
	}
	return &Event{ID: id, Type: typ, Payload: payload, RequestID: requestid.From(ctx), CreatedAt: now}, nil
}
