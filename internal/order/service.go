package order

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/inventory"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/kafka"
)

// Limits of an order request (CONTRACT.md).
const (
	MaxItems    = 50
	MaxQuantity = 1000
)

// Service runs the order use cases. Each one is a single transaction; when the idempotency
// middleware opened one (with its dedup record inserted first), the use case runs inside it
// as a savepoint, so a refused request undoes its own writes and nothing else.
type Service struct {
	db     *gorm.DB
	ids    *ids.Generator
	orders *Store
	stock  *inventory.Movements
	events *outbox.Writer
	ttl    time.Duration
}

// NewService returns the order service. Unpaid orders expire after ttl.
func NewService(db *gorm.DB, gen *ids.Generator, stock *inventory.Movements, events *outbox.Writer, ttl time.Duration) *Service {
	return &Service{db: db, ids: gen, orders: NewStore(db), stock: stock, events: events, ttl: ttl}
}

// Line is one requested SKU and quantity.
type Line = inventory.Line

// Validate checks an order request against the contract's limits: 1..50 lines, each SKU
// once, quantities 1..1000.
func Validate(lines []Line) error {
	if len(lines) == 0 || len(lines) > MaxItems {
		return apperr.ErrInvalidRequest.Withf("items must hold 1..%d lines, got %d", MaxItems, len(lines))
	}
	seen := make(map[string]bool, len(lines))
	for _, l := range lines {
		switch {
		case l.SKU == "" || len(l.SKU) > 64:
			return apperr.ErrInvalidRequest.Withf("sku must be 1..64 characters")
		case l.Quantity < 1 || l.Quantity > MaxQuantity:
			return apperr.ErrInvalidRequest.Withf("quantity of %s must be 1..%d, got %d", l.SKU, MaxQuantity, l.Quantity)
		case seen[l.SKU]:
			return apperr.ErrInvalidRequest.Withf("sku %s is listed twice; send one line per SKU", l.SKU)
		}
		seen[l.SKU] = true
	}
	return nil
}

// Create reserves stock and creates a PENDING_PAYMENT order for userID, with its
// order.created event, in one transaction.
func (s *Service) Create(ctx context.Context, userID int64, lines []Line) (Order, error) {
	if err := Validate(lines); err != nil {
		return Order{}, err
	}
	now := time.Now().UTC()
	o := Order{
		ID: s.ids.Next(), UserID: userID, Status: PendingPayment, Currency: Currency,
		CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(s.ttl),
	}
	err := database.Transaction(ctx, s.db, func(ctx context.Context, _ *gorm.DB) error {
		prices, err := s.stock.Prices(ctx, lines)
		if err != nil {
			return err
		}
		if err := s.stock.Apply(ctx, inventory.Reserve, o.ID, lines); err != nil {
			return err
		}
		for _, l := range lines {
			o.Items = append(o.Items, Item{OrderID: o.ID, SKU: l.SKU, Quantity: l.Quantity, Price: prices[l.SKU]})
			o.Amount += l.Quantity * prices[l.SKU]
		}
		if err := s.orders.Insert(ctx, &o); err != nil {
			return err
		}
		return s.emit(ctx, o, "order.created")
	})
	return o, err
}

// Get returns order id if it belongs to userID; another user's order is ErrNotFound.
func (s *Service) Get(ctx context.Context, userID, id int64) (Order, error) {
	o, err := s.orders.Get(ctx, id)
	if err == nil && o.UserID != userID {
		return Order{}, ErrNotFound
	}
	return o, err
}

// Cancel moves userID's order id from PENDING_PAYMENT to CANCELLED and releases its stock.
// An order that has moved on is ErrIllegalState with the order's current state.
func (s *Service) Cancel(ctx context.Context, userID, id int64) (Order, error) {
	var o Order
	err := database.Transaction(ctx, s.db, func(ctx context.Context, _ *gorm.DB) error {
		var err error
		if o, err = s.Get(ctx, userID, id); err != nil {
			return err
		}
		moved, err := s.end(ctx, o, Cancelled, "order.cancelled")
		if err != nil {
			return err
		}
		if !moved {
			if o, err = s.orders.Current(ctx, id); err != nil {
				return err
			}
			return ErrIllegalState.Withf("order %d is %s; only %s orders can be cancelled", id, o.Status, PendingPayment)
		}
		o, err = s.orders.Get(ctx, id)
		return err
	})
	return o, err
}

// Close moves an expired order from PENDING_PAYMENT to CLOSED and releases its stock. It
// reports false when the order had already moved on — paid in the meantime, say — and then
// changes nothing (I5).
func (s *Service) Close(ctx context.Context, id int64) (bool, error) {
	var moved bool
	err := database.Transaction(ctx, s.db, func(ctx context.Context, _ *gorm.DB) error {
		o, err := s.orders.Get(ctx, id)
		if err != nil {
			return err
		}
		moved, err = s.end(ctx, o, Closed, "order.closed")
		return err
	})
	return moved, err
}

// end moves o to CANCELLED or CLOSED, releases its stock and writes its event, or reports
// false when the precondition turned it away.
func (s *Service) end(ctx context.Context, o Order, to Status, event string) (bool, error) {
	moved, err := s.orders.Transition(ctx, o.ID, to, nil)
	if err != nil || !moved {
		return false, err
	}
	if err := s.stock.Apply(ctx, inventory.Release, o.ID, lines(o)); err != nil {
		return false, err
	}
	o.Status = to
	return true, s.emit(ctx, o, event)
}

// Pay moves order id from PENDING_PAYMENT to PAID for the channel's trade, confirms its
// stock and writes order.paid. It reports false, changing nothing, when the order had already
// moved on; the returned order is then its current state, for the caller to decide.
func (s *Service) Pay(ctx context.Context, id int64, channel, tradeNo string) (bool, Order, error) {
	var (
		moved bool
		o     Order
	)
	err := database.Transaction(ctx, s.db, func(ctx context.Context, _ *gorm.DB) error {
		var err error
		now := time.Now().UTC()
		moved, err = s.orders.Transition(ctx, id, Paid, map[string]any{"channel": channel, "trade_no": tradeNo, "paid_at": now})
		if err != nil {
			return err
		}
		if o, err = s.orders.Current(ctx, id); err != nil || !moved {
			return err
		}
		if err := s.stock.Apply(ctx, inventory.Confirm, o.ID, lines(o)); err != nil {
			return err
		}
		return s.emit(ctx, o, "order.paid")
	})
	return moved, o, err
}

// Lookup returns order id whoever owns it, for the payment path.
func (s *Service) Lookup(ctx context.Context, id int64) (Order, error) { return s.orders.Get(ctx, id) }

// ExpiredIDs returns up to limit orders past their expiry, still unpaid.
func (s *Service) ExpiredIDs(ctx context.Context, limit int) ([]int64, error) {
	return s.orders.ExpiredIDs(ctx, time.Now().UTC(), limit)
}

func lines(o Order) []Line {
	out := make([]Line, len(o.Items))
	for i, it := range o.Items {
		out[i] = Line{SKU: it.SKU, Quantity: it.Quantity}
	}
	return out
}

// Event is the value of an order.events message.
type Event struct {
	EventID    string `json:"event_id"`
	Type       string `json:"type"`
	OrderID    string `json:"order_id"`
	UserID     string `json:"user_id"`
	Status     Status `json:"status"`
	Amount     int64  `json:"amount"`
	OccurredAt string `json:"occurred_at"`
}

// emit writes an order event to the outbox, in the same transaction as the change.
func (s *Service) emit(ctx context.Context, o Order, typ string) error {
	err := s.events.Add(ctx, kafka.TopicOrderEvents, ids.Format(o.ID), func(eventID int64) any {
		return Event{
			EventID: ids.Format(eventID), Type: typ, OrderID: ids.Format(o.ID), UserID: ids.Format(o.UserID),
			Status: o.Status, Amount: o.Amount, OccurredAt: time.Now().UTC().Format(time.RFC3339Nano),
		}
	})
	if err != nil {
		return fmt.Errorf("outbox %s: %w", typ, err)
	}
	return nil
}
