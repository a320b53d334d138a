// Package refund returns money through the payment channel, with recovery points (I8: a
// refund call timed out, was retried under a new number, and the channel refunded twice).
//
// A refund is a row before it is a call. It is committed PENDING with a fresh out_refund_no
// before the channel hears of it; it becomes SUBMITTED when the channel answered (its
// refund_no stored), and SUCCEEDED or FAILED by the channel's notification or by a query,
// through the same key (channel + refund_no) and the same work. A call whose outcome is
// unknown — a timeout, a 5xx, an instance stopped between the commit and the call — leaves
// the row PENDING, and resume-refunds calls again with the SAME out_refund_no, which the
// channel is idempotent by: the number is the row's, never the call's, so the channel refunds
// once. When an order's SUCCEEDED refunds reach its amount it moves PAID → REFUNDED and its
// stock goes back. Payments that could not be applied (anomalies paid_after_close and
// duplicate_payment) are refunded too, once each: their refund row is keyed by the anomaly.
package refund

import (
	"net/http"
	"time"

	"github.com/oncepay/oncepay/internal/idemhttp"
	"github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// Status is a refund's recovery point.
type Status string

// The refund statuses (CONTRACT.md).
const (
	Pending   Status = "PENDING"
	Submitted Status = "SUBMITTED"
	Succeeded Status = "SUCCEEDED"
	Failed    Status = "FAILED"
)

// transitions lists, for each status, the statuses a refund may come from: the preconditions
// of its conditional UPDATEs. A notification may overtake the answer of the call (the call
// timed out after the channel applied it), so the final statuses are reachable from PENDING.
var transitions = map[Status][]Status{
	Submitted: {Pending},
	Succeeded: {Pending, Submitted},
	Failed:    {Pending, Submitted},
}

// From returns the statuses a refund may reach to from.
func From(to Status) []Status { return transitions[to] }

// Errors of this package.
var (
	// ErrExceedsPaid is a refund that would take an order's refunds beyond what was paid.
	ErrExceedsPaid = apperr.New(http.StatusConflict, "refund_exceeds_paid", "the refunds of an order cannot exceed what was paid")
	// ErrNotFound is an unknown refund or another user's.
	ErrNotFound = apperr.ErrNotFound.Withf("no such refund")
	// ErrInvalidAmount is a requested refund amount out of range.
	ErrInvalidAmount = apperr.ErrInvalidRequest.Withf("amount must be 1..10^10 cents")
	// ErrAmountMismatch is a notification whose amount differs from the refund's.
	ErrAmountMismatch = apperr.New(http.StatusBadRequest, "amount_mismatch", "the refunded amount differs from the refund's amount")
)

// Refund is a row of refunds.
type Refund struct {
	ID          int64
	OrderID     int64
	UserID      int64
	AnomalyID   *int64
	Channel     string
	OutTradeNo  string
	OutRefundNo string
	RefundNo    *string
	Amount      int64
	Reason      string
	Status      Status
	Attempts    int
	LastError   *string
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// BizType names refund notifications in the dedup table.
const BizType = "refund.notify"

// Route is the route of the refund notification; a query settles with its fingerprint too.
const Route = "/v1/refunds/notify"

// Notification is what the channel reports about a refund (CONTRACT.md).
type Notification struct {
	Channel     string `json:"channel"`
	RefundNo    string `json:"refund_no"`
	OutRefundNo string `json:"out_refund_no"`
	Amount      int64  `json:"amount"`
	Status      string `json:"status"`
}

// The channel's refund statuses that end a refund.
const (
	channelSuccess = "SUCCESS"
	channelFailed  = "FAILED"
	channelClosed  = "CLOSED"
)

// Parse decodes and validates a refund notification completely, before it is keyed: a
// malformed one is answered 400 and stores nothing.
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
	case n.RefundNo == "" || len(n.RefundNo) > 128:
		return Notification{}, apperr.ErrInvalidRequest.Withf("refund_no must be 1..128 characters")
	case n.OutRefundNo == "" || len(n.OutRefundNo) > 128:
		return Notification{}, apperr.ErrInvalidRequest.Withf("out_refund_no must be 1..128 characters")
	case n.Amount < 1 || n.Amount > 10_000_000_000:
		return Notification{}, apperr.ErrInvalidRequest.Withf("amount must be 1..10^10 cents")
	}
	return n, nil
}

// Key is the business key of a refund notification: channel + refund_no, a status other than
// SUCCESS keyed apart (idemhttp.NotificationKey), like payments.
func (n Notification) Key() idempotent.Key {
	return idemhttp.NotificationKey(n.Channel, BizType, n.RefundNo, n.Status, channelSuccess)
}

// target is the status a notification's channel status ends a refund in, if any.
func (n Notification) target() (Status, bool) {
	switch n.Status {
	case channelSuccess:
		return Succeeded, true
	case channelFailed, channelClosed:
		return Failed, true
	}
	return "", false
}
