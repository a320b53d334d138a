// Package payment applies payment notifications from channels. Whatever path a copy takes —
// the channel's HTTP callback, its retry, a gateway's retry, or the payment.notifications
// Kafka topic — it is named by the same business key, channel + trade_no, and goes through
// the same Service.Apply, so every copy converges on one dedup record and one payments row
// (I1). The order's state precondition still holds when the dedup record is gone (I6), and a
// payment that cannot be applied is recorded as an anomaly for refund (I5).
package payment

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/idemhttp"
	"github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/requestid"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// BizType names payment notifications in the dedup table.
const BizType = "payment.notify"

// Route is the route pattern of the HTTP path; the Kafka path fingerprints its copies with
// it too, so that an HTTP copy and a Kafka copy of one notification are the same request.
const Route = "/v1/payments/notify"

// StatusSuccess is the only notification status that pays an order.
const StatusSuccess = "SUCCESS"

// ErrAmountMismatch is a notification whose amount differs from the order's.
var ErrAmountMismatch = apperr.New(http.StatusBadRequest, "amount_mismatch", "the paid amount differs from the order's amount")

// Notification is what a channel reports (CONTRACT.md).
type Notification struct {
	Channel    string `json:"channel"`
	TradeNo    string `json:"trade_no"`
	OutTradeNo string `json:"out_trade_no"`
	Amount     int64  `json:"amount"`
	Status     string `json:"status"`
}

// Parse decodes and validates a notification body: strict JSON (web.DecodeBytes), the channel
// in its one canonical form (web.CheckChannel), then every field's presence and range. The
// HTTP handler and the Kafka consumer both call it before the notification is keyed.
func Parse(body []byte) (Notification, error) {
	var n Notification
	if err := web.DecodeBytes(body, &n); err != nil {
		return Notification{}, err
	}
	if err := web.CheckChannel("channel", n.Channel); err != nil {
		return Notification{}, err
	}
	if err := web.CheckStatus("status", n.Status); err != nil {
		return Notification{}, err
	}
	switch {
	case n.TradeNo == "" || len(n.TradeNo) > 128:
		return Notification{}, apperr.ErrInvalidRequest.Withf("trade_no must be 1..128 characters")
	case n.OutTradeNo == "":
		return Notification{}, apperr.ErrInvalidRequest.Withf("out_trade_no is required")
	case n.Amount < 1 || n.Amount > 10_000_000_000:
		return Notification{}, apperr.ErrInvalidRequest.Withf("amount must be 1..10^10 cents")
	}
	return n, nil
}

// Key is the business idempotency key of a notification: channel + trade_no, a status other
// than SUCCESS keyed apart (idemhttp.NotificationKey).
func (n Notification) Key() idempotent.Key {
	return idemhttp.NotificationKey(n.Channel, BizType, n.TradeNo, n.Status, StatusSuccess)
}

// Payment is a row of payments.
type Payment struct {
	ID        int64
	Channel   string
	TradeNo   string
	OrderID   int64
	Amount    int64
	Status    string
	RequestID string
	CreatedAt time.Time
}

// Result says what a notification did.
type Result string

// The results of Apply.
const (
	// Applied: the order moved to PAID now.
	Applied Result = "applied"
	// AlreadyPaid: the order was already paid by this trade (a copy that outlived its dedup
	// record, I6).
	AlreadyPaid Result = "already_paid"
	// Refused: the order had moved on (cancelled, closed, paid by another trade): an anomaly
	// was recorded for refund and nothing else changed (I5).
	Refused Result = "refused"
	// Ignored: a notification whose status is not SUCCESS.
	Ignored Result = "ignored"
)

// Service applies notifications.
type Service struct {
	db        *gorm.DB
	ids       *ids.Generator
	orders    *order.Service
	anomalies *anomaly.Recorder
}

// NewService returns the payment service.
func NewService(db *gorm.DB, gen *ids.Generator, orders *order.Service, anomalies *anomaly.Recorder) *Service {
	return &Service{db: db, ids: gen, orders: orders, anomalies: anomalies}
}

// Apply applies one notification in tx, the guard's transaction whose dedup record on
// channel + trade_no commits with it (I3). An amount that differs from the order's is
// recorded as an anomaly in tx and answered ErrAmountMismatch, and a trade that already paid
// another order as a trade_conflict answered anomaly.ErrTradeConflict: the caller commits the
// anomaly with that answer (see Answer).
func (s *Service) Apply(ctx context.Context, tx *gorm.DB, n Notification) (Result, error) {
	if n.Status != StatusSuccess {
		return Ignored, nil
	}
	orderID, ok := ids.Parse(n.OutTradeNo)
	if !ok {
		return "", order.ErrNotFound
	}
	o, err := s.orders.Lookup(ctx, tx, orderID)
	if err != nil {
		return "", err
	}
	// The trade's owner (I1): a channel + trade_no that already paid another order is refused
	// here too, for a copy that outlived its dedup record (I6), before it could pay this order.
	if owner, found, err := s.tradeOwner(ctx, tx, n); err != nil {
		return "", err
	} else if found && owner != o.ID {
		if err := s.anomalies.Record(ctx, tx, conflictAnomaly(n, owner)); err != nil {
			return "", err
		}
		return "", anomaly.ErrTradeConflict.Withf("%s", conflictDetail(n, owner))
	}
	if o.Amount != n.Amount {
		detail := fmt.Sprintf("order %d costs %d, channel reported %d", o.ID, o.Amount, n.Amount)
		if err := s.record(ctx, tx, anomaly.AmountMismatch, o.ID, n, detail); err != nil {
			return "", err
		}
		return "", ErrAmountMismatch.Withf("%s", detail)
	}
	moved, current, err := s.orders.Pay(ctx, tx, orderID, n.Channel, n.TradeNo)
	if err != nil {
		return "", err
	}
	if !moved {
		return s.refuse(ctx, tx, current, n)
	}
	// The payments row's unique (channel, trade_no) is the last line against one trade
	// paying twice, whichever path its copies took (I1).
	p := Payment{ID: s.ids.Next(), Channel: n.Channel, TradeNo: n.TradeNo, OrderID: o.ID,
		Amount: n.Amount, Status: StatusSuccess, RequestID: requestid.From(ctx), CreatedAt: time.Now().UTC()}
	return Applied, tx.WithContext(ctx).Create(&p).Error
}

// TradeConflict reports whether n, a notification the guard refused because its key
// (channel + trade_no) was stored with another body, names another order than the one the
// trade already belongs to — the trade's payment, or the anomaly recorded when it could not
// pay. It then records the anomaly trade_conflict in its own small transaction (once per
// channel + trade_no, however many copies) and the caller answers 422 trade_conflict; a copy
// for the same order with another body is an ordinary key reuse (I1).
func (s *Service) TradeConflict(ctx context.Context, n Notification) (bool, error) {
	owner, found, err := s.tradeOwner(ctx, s.db, n)
	if err != nil || !found {
		return false, err
	}
	if id, ok := ids.Parse(n.OutTradeNo); ok && id == owner {
		return false, nil
	}
	return true, s.anomalies.RecordAlone(ctx, conflictAnomaly(n, owner))
}

// tradeOwner returns the order that n's channel + trade_no belongs to: the order it paid
// (payments), or else the order named by an anomaly recorded for it (paid after close, amount
// mismatch, duplicate payment). found is false for a trade seen nowhere.
func (s *Service) tradeOwner(ctx context.Context, db *gorm.DB, n Notification) (owner int64, found bool, err error) {
	var orderIDs []int64
	err = db.WithContext(ctx).Model(&Payment{}).Where("channel = ? AND trade_no = ?", n.Channel, n.TradeNo).
		Limit(1).Pluck("order_id", &orderIDs).Error
	if err == nil && len(orderIDs) == 0 {
		err = db.WithContext(ctx).Model(&anomaly.Anomaly{}).
			Where("channel = ? AND trade_no = ? AND order_id IS NOT NULL AND kind IN ?", n.Channel, n.TradeNo,
				[]string{anomaly.PaidAfterClose, anomaly.AmountMismatch, anomaly.DuplicatePayment}).
			Order("id").Limit(1).Pluck("order_id", &orderIDs).Error
	}
	if err != nil || len(orderIDs) == 0 {
		return 0, false, err
	}
	return orderIDs[0], true, nil
}

// conflictAnomaly is the trade_conflict anomaly of n, whose trade belongs to order owner. It
// names the order n asked for, when out_trade_no is an order id.
func conflictAnomaly(n Notification, owner int64) anomaly.Anomaly {
	a := anomaly.Anomaly{Kind: anomaly.TradeConflict, Channel: n.Channel, TradeNo: n.TradeNo, Amount: n.Amount, Detail: conflictDetail(n, owner)}
	if id, ok := ids.Parse(n.OutTradeNo); ok {
		a.OrderID = &id
	}
	return a
}

func conflictDetail(n Notification, owner int64) string {
	return fmt.Sprintf("%s trade %s belongs to order %d; out_trade_no %q names another", n.Channel, n.TradeNo, owner, n.OutTradeNo)
}

// Work is the guarded work of one notification, the same for the HTTP and the Kafka path so
// that either can replay what the other stored.
func (s *Service) Work(n Notification) idempotent.Work {
	return func(ctx context.Context, tx *gorm.DB) (idempotent.Response, error) {
		result, err := s.Apply(ctx, tx, n)
		return Answer(ctx, result, err)
	}
}

// refuse answers a notification for an order that has moved on. The channel gets success
// either way, so that it stops retrying; what cannot be applied is kept for refund (I5).
func (s *Service) refuse(ctx context.Context, tx *gorm.DB, o order.Order, n Notification) (Result, error) {
	switch {
	case o.Status == order.Paid && o.TradeNo != nil && *o.TradeNo == n.TradeNo && o.Channel != nil && *o.Channel == n.Channel:
		return AlreadyPaid, nil
	case o.Status == order.Paid:
		return Refused, s.record(ctx, tx, anomaly.DuplicatePayment, o.ID, n, fmt.Sprintf("order %d was already paid by another trade", o.ID))
	default:
		return Refused, s.record(ctx, tx, anomaly.PaidAfterClose, o.ID, n, fmt.Sprintf("order %d is %s; refund the payment", o.ID, o.Status))
	}
}

func (s *Service) record(ctx context.Context, tx *gorm.DB, kind string, orderID int64, n Notification, detail string) error {
	return s.anomalies.Record(ctx, tx, anomaly.Anomaly{
		Kind: kind, OrderID: &orderID, Channel: n.Channel, TradeNo: n.TradeNo, Amount: n.Amount, Detail: detail,
	})
}

// successBody is the answer channels expect, for first deliveries and duplicates alike.
var successBody = []byte(`{"result":"success"}` + "\n")

// Answer turns the outcome of Apply into the channel's answer. Success, and a refusal the
// state precondition made (the order moved on), are 200 success so that the channel stops;
// an amount mismatch (400) and a trade that belongs to another order (422 trade_conflict) are
// committed with their anomaly; any other error is returned for
// the guard (a 4xx is stored alone after the rollback, anything else stores nothing).
func Answer(ctx context.Context, result Result, err error) (idempotent.Response, error) {
	switch {
	case err == nil:
		resp := idempotent.Response{Status: http.StatusOK, Header: map[string]string{"Content-Type": "application/json"}, Body: successBody}
		if result == Refused || result == AlreadyPaid {
			resp.Header["Idempotency-Outcome"] = string(idempotent.StateRejected)
		}
		return resp, nil
	case errors.Is(err, ErrAmountMismatch), errors.Is(err, anomaly.ErrTradeConflict):
		resp, _ := idemhttp.StoredProblemAt(Route)(ctx, err)
		return resp, nil
	}
	return idempotent.Response{}, err
}
