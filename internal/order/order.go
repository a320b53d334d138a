// Package order owns orders and their state machine. Every status change is one conditional
// UPDATE whose precondition comes from the transition table below; the number of rows it
// affected decides what happened, never a SELECT before it (I1, I5).
package order

import (
	"net/http"
	"time"

	"github.com/oncepay/oncepay/internal/platform/apperr"
)

// Status is an order's place in its lifecycle.
type Status string

// The order statuses (docs/contract.md).
const (
	PendingPayment Status = "PENDING_PAYMENT"
	Paid           Status = "PAID"
	Cancelled      Status = "CANCELLED"
	Closed         Status = "CLOSED"
	// Refunded: the SUCCEEDED refunds of a PAID order reached its amount; its stock went back.
	Refunded Status = "REFUNDED"
)

// transitions lists, for each status, the statuses an order may come from. It is the only
// source of the preconditions in the conditional UPDATEs: a late close task (I5) or a late
// copy of a payment (I1) finds the order already moved on, affects 0 rows, and changes
// nothing — in particular, nothing but its refunds ever moves an order out of PAID.
var transitions = map[Status][]Status{
	Paid:      {PendingPayment},
	Cancelled: {PendingPayment},
	Closed:    {PendingPayment},
	Refunded:  {Paid},
}

// From returns the statuses an order may reach to from.
func From(to Status) []Status { return transitions[to] }

// Errors of this package.
var (
	// ErrIllegalState is a change the order's current status does not allow.
	ErrIllegalState = apperr.New(http.StatusConflict, "illegal_state", "the order's status does not allow this")
	// ErrNotFound is an unknown order or another user's.
	ErrNotFound = apperr.ErrNotFound.Withf("no such order")
)

// Order is a row of orders with its items.
type Order struct {
	ID        int64
	UserID    int64
	Status    Status
	Amount    int64
	Currency  string
	Channel   *string
	TradeNo   *string
	CreatedAt time.Time
	UpdatedAt time.Time
	ExpiresAt time.Time
	PaidAt    *time.Time
	Items     []Item `gorm:"-"`
}

// Item is a row of order_items: a SKU, its quantity and its unit price at order time.
type Item struct {
	OrderID  int64
	SKU      string `gorm:"column:sku"`
	Quantity int64
	Price    int64
}

// TableName is the table of Item.
func (Item) TableName() string { return "order_items" }

// Currency is the only currency oncepay handles.
const Currency = "CNY"

// PaidBy reports whether o was paid by channel's trade tradeNo, whatever its status since
// (paid, partially or fully refunded): the fact a redelivered report is recognised by once
// its dedup record is gone (I13).
func (o Order) PaidBy(channel, tradeNo string) bool {
	return o.Channel != nil && o.TradeNo != nil && *o.Channel == channel && *o.TradeNo == tradeNo
}
