package outbox

import (
	"encoding/json"
	"time"
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
