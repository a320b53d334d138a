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

// The event types a merchant hears of (docs/contract.md, webhooks). More may come; a receiver
// ignores a type it does not know.
const (
	OrderCreated      = "order.created"
	OrderPaid         = "order.paid"
	OrderCancelled    = "order.cancelled"
	OrderClosed       = "order.closed"
	OrderRefunded     = "order.refunded"
	RefundSucceeded   = "refund.succeeded"
	RefundFailed      = "refund.failed"
	RechargeSucceeded = "recharge.succeeded"
)

// EventTypes lists every event type, in the contract's order.
var EventTypes = []string{OrderCreated, OrderPaid, OrderCancelled, OrderClosed, OrderRefunded,
	RefundSucceeded, RefundFailed, RechargeSucceeded}

// Event is a row of the events table: a business change as a merchant hears of it, by webhook
// and through GET /v1/admin/events. It is written in the transaction of the change, like an
// outbox row, so that a change that rolls back announces nothing and one that commits cannot
// lose its event (I17: an event published before its commit announced an order that never
// existed). Payload is the exact body of every delivery of the event — a redelivery sends the
// same bytes — and Seq its place in the feed, given after the commit (webhook.Sequencer).
type Event struct {
	ID        int64
	Type      string
	Payload   []byte
	RequestID string
	Seq       *int64
	CreatedAt time.Time
}

// TableName is the table of Event.
func (Event) TableName() string { return "events" }

// Envelope is the JSON of an event (docs/contract.md): the payload of its row.
type Envelope struct {
	EventID   string          `json:"event_id"`
	Type      string          `json:"type"`
	CreatedAt string          `json:"created_at"`
	Data      json.RawMessage `json:"data"`
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
