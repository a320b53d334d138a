// Package refund returns money through the payment channel, with recovery points (I8: a
// refund call timed out, was retried under a new number, and the channel refunded twice).
//
// A refund is a row before it is a call. It is committed PENDING with a fresh out_refund_no
// before the channel hears of it; it becomes SUBMITTED when the channel answered (its
// refund_no stored), and SUCCEEDED or FAILED by the channel's report or by a query, through
// the inbound port (internal/notify): the same key (channel + refund_no) and the same work,
// Reports.Apply. A call whose outcome is
// unknown — a timeout, a 5xx, an instance stopped between the commit and the call — leaves
// the row PENDING, and resume-refunds calls again with the SAME out_refund_no, which the
// channel is idempotent by: the number is the row's, never the call's, so the channel refunds
// once. When an order's SUCCEEDED refunds reach its amount it moves PAID → REFUNDED and its
// stock goes back. Payments that could not be applied (anomalies paid_after_close and
// duplicate_payment) are refunded too, once each — their refund row is keyed by the anomaly
// — through the channel that took them and by its trade_no, whether they paid an order or a
// recharge.
package refund

import (
	"net/http"
	"time"

	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/platform/apperr"
)

// Status is a refund's recovery point.
type Status string

// The refund statuses (docs/contract.md).
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
	ID int64
	// OrderID is the order refunded, or whose payment kept as an anomaly is given back.
	OrderID *int64
	// RechargeID is the recharge whose second payment (an anomaly) is given back.
	RechargeID *int64
	UserID     int64
	// AnomalyID is the anomaly (paid_after_close, duplicate_payment) this refund gives back;
	// nil for a refund a user asked for.
	AnomalyID *int64
	// Channel is the channel that took the payment, and refunds it.
	Channel    string
	OutTradeNo string
	// TradeNo is the channel's trade refunded, when known: an anomaly's refund names the
	// trade by it, so that a second trade of one order is refunded on its own.
	TradeNo     *string
	OutRefundNo string
	RefundNo    *string
	Amount      int64
	Reason      string
	Status      Status
	// ChannelStatus is what the channel said last about the refund: its report's status, or
	// the contradicting one (refund_status_conflict) that did not move Status.
	ChannelStatus *string
	Attempts      int
	LastError     *string
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// target is the status a report's channel status ends a refund in, if any.
func target(status string) (Status, bool) {
	switch status {
	case "SUCCESS":
		return Succeeded, true
	case "FAILED", "CLOSED":
		return Failed, true
	}
	return "", false
}

// booked is r as the books see it: the money of a refund a customer asked for goes back out
// of the merchant's revenue, that of a payment kept as an anomaly out of suspense.
func booked(r Refund) ledger.Refund {
	from := ledger.Revenue
	if r.AnomalyID != nil {
		from = ledger.Suspense
	}
	return ledger.Refund{Channel: r.Channel, OutRefundNo: r.OutRefundNo, Amount: r.Amount, TradeNo: r.TradeNo, From: from}
}
