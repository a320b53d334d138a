package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// Result is the final answer of a write: its decoded body and what oncepay said about its key.
type Result[T any] struct {
	// Value is the decoded answer.
	Value T
	Meta
}

// Item is one line of an order.
type Item struct {
	SKU      string `json:"sku"`
	Quantity int64  `json:"quantity"`
	// Price is the unit price in cents, as the order charged it (answers only).
	Price int64 `json:"price,omitempty"`
}

// Order is oncepay's order (docs/contract.md, Order JSON). Money is in cents, CNY.
type Order struct {
	OrderID   string     `json:"order_id"`
	UserID    string     `json:"user_id"`
	Status    string     `json:"status"`
	Amount    int64      `json:"amount"`
	Currency  string     `json:"currency"`
	Items     []Item     `json:"items"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt time.Time  `json:"expires_at"`
	PaidAt    *time.Time `json:"paid_at"`
	// TradeNo is the channel's trade that paid the order.
	TradeNo *string `json:"trade_no"`
}

// Trade is the channel trade that pays an order (POST /v1/orders/{order_id}/payments).
type Trade struct {
	OrderID string `json:"order_id"`
	Channel string `json:"channel"`
	TradeNo string `json:"trade_no"`
	// PayURL is the channel's cashier page, where the buyer pays.
	PayURL string `json:"pay_url"`
	Status string `json:"status"`
}

// RefundRequest asks for a refund of a paid order.
type RefundRequest struct {
	// Amount in cents; 0 asks for the whole amount not yet refunded.
	Amount int64 `json:"amount,omitempty"`
	// Reason is kept with the refund.
	Reason string `json:"reason,omitempty"`
}

// Refund is oncepay's refund; Status is the recovery point (PENDING, SUBMITTED, SUCCEEDED,
// FAILED).
type Refund struct {
	RefundID      string    `json:"refund_id"`
	OrderID       string    `json:"order_id,omitempty"`
	RechargeID    string    `json:"recharge_id,omitempty"`
	Amount        int64     `json:"amount"`
	Reason        string    `json:"reason"`
	Status        string    `json:"status"`
	OutRefundNo   string    `json:"out_refund_no"`
	RefundNo      *string   `json:"refund_no"`
	ChannelStatus *string   `json:"channel_status,omitempty"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
}

// Recharge is a top-up of the caller's balance, PENDING until the channel reports it paid.
type Recharge struct {
	RechargeID  string `json:"recharge_id"`
	UserID      string `json:"user_id"`
	Status      string `json:"status"`
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	Channel     string `json:"channel,omitempty"`
	TradeNo     string `json:"trade_no,omitempty"`
	CreatedAt   string `json:"created_at"`
	SucceededAt string `json:"succeeded_at,omitempty"`
}

// Account is the caller's balance in cents.
type Account struct {
	UserID   string `json:"user_id"`
	Balance  int64  `json:"balance"`
	Currency string `json:"currency"`
}

// Inventory is one SKU's price and stock.
type Inventory struct {
	SKU       string `json:"sku"`
	Name      string `json:"name"`
	Price     int64  `json:"price"`
	Available int64  `json:"available"`
	Reserved  int64  `json:"reserved"`
	Sold      int64  `json:"sold"`
}

// Token is a one-time token: the Idempotency-Key of the one form submission it was issued
// for (I7). Pass it WithKey.
type Token struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// CreateOrder places an order (POST /v1/orders): 201 PENDING_PAYMENT with its stock reserved.
// Refusals: out_of_stock (409) and unknown_sku (400), both stored under the key.
func (c *Client) CreateOrder(ctx context.Context, items []Item, opts ...CallOption) (Result[Order], error) {
	type line struct {
		SKU      string `json:"sku"`
		Quantity int64  `json:"quantity"`
	}
	body := struct {
		Items []line `json:"items"`
	}{Items: make([]line, len(items))}
	for i, it := range items {
		body.Items[i] = line{it.SKU, it.Quantity}
	}
	return write[Order](ctx, c, http.MethodPost, "/v1/orders", body, opts)
}

// CancelOrder cancels a PENDING_PAYMENT order and releases its stock
// (POST /v1/orders/{order_id}/cancel); an order that moved on is 409 illegal_state.
func (c *Client) CancelOrder(ctx context.Context, orderID string, opts ...CallOption) (Result[Order], error) {
	return write[Order](ctx, c, http.MethodPost, "/v1/orders/"+url.PathEscape(orderID)+"/cancel", nil, opts)
}

// OpenPayment opens, or returns, the channel trade of an unpaid order
// (POST /v1/orders/{order_id}/payments); the buyer pays at Trade.PayURL.
func (c *Client) OpenPayment(ctx context.Context, orderID string, opts ...CallOption) (Result[Trade], error) {
	return write[Trade](ctx, c, http.MethodPost, "/v1/orders/"+url.PathEscape(orderID)+"/payments", nil, opts)
}

// CreateRefund asks for a refund of a PAID order (POST /v1/orders/{order_id}/refunds): 201
// with the refund PENDING, committed before the channel is called.
func (c *Client) CreateRefund(ctx context.Context, orderID string, r RefundRequest, opts ...CallOption) (Result[Refund], error) {
	var body any
	if r != (RefundRequest{}) {
		body = r
	}
	return write[Refund](ctx, c, http.MethodPost, "/v1/orders/"+url.PathEscape(orderID)+"/refunds", body, opts)
}

// CreateRecharge asks for a top-up of amount cents (POST /v1/recharges): 201 PENDING.
func (c *Client) CreateRecharge(ctx context.Context, amount int64, opts ...CallOption) (Result[Recharge], error) {
	body := struct {
		Amount int64 `json:"amount"`
	}{amount}
	return write[Recharge](ctx, c, http.MethodPost, "/v1/recharges", body, opts)
}

// Token issues a one-time token for a form (POST /v1/idempotency-tokens, I7). It is not a
// keyed write: an answer lost on the way leaves a token nobody uses, which expires.
func (c *Client) Token(ctx context.Context) (Token, error) {
	return read[Token](ctx, c, http.MethodPost, "/v1/idempotency-tokens", nil)
}

// Order reads one of the caller's orders.
func (c *Client) Order(ctx context.Context, orderID string) (Order, error) {
	return read[Order](ctx, c, http.MethodGet, "/v1/orders/"+url.PathEscape(orderID), nil)
}

// Refund reads one of the caller's refunds.
func (c *Client) Refund(ctx context.Context, refundID string) (Refund, error) {
	return read[Refund](ctx, c, http.MethodGet, "/v1/refunds/"+url.PathEscape(refundID), nil)
}

// Recharge reads one of the caller's recharges.
func (c *Client) Recharge(ctx context.Context, rechargeID string) (Recharge, error) {
	return read[Recharge](ctx, c, http.MethodGet, "/v1/recharges/"+url.PathEscape(rechargeID), nil)
}

// Account reads the caller's balance.
func (c *Client) Account(ctx context.Context) (Account, error) {
	return read[Account](ctx, c, http.MethodGet, "/v1/accounts/me", nil)
}

// Inventory reads a SKU's price and stock (public).
func (c *Client) Inventory(ctx context.Context, sku string) (Inventory, error) {
	return read[Inventory](ctx, c, http.MethodGet, "/v1/inventory/"+url.PathEscape(sku), nil)
}

// SetInventory sets a SKU's price and available stock (PUT /v1/admin/inventory/{sku}, the
// admin key). It is naturally idempotent — absolute values — so it is retried without a key.
func (c *Client) SetInventory(ctx context.Context, sku string, price, available int64) (Inventory, error) {
	body := struct {
		Price     int64 `json:"price"`
		Available int64 `json:"available"`
	}{price, available}
	return read[Inventory](ctx, c, http.MethodPut, "/v1/admin/inventory/"+url.PathEscape(sku), body)
}

// write sends a keyed write and decodes its answer.
func write[T any](ctx context.Context, c *Client, method, path string, body any, opts []CallOption) (Result[T], error) {
	resp, err := c.Do(ctx, Request{Method: method, Path: path, Body: body, Keyed: true}, opts...)
	if err != nil {
		return Result[T]{}, err
	}
	res := Result[T]{Meta: resp.Meta}
	if err := json.Unmarshal(resp.Body, &res.Value); err != nil {
		return res, fmt.Errorf("client: %s %s: decoding the answer: %w", method, path, err)
	}
	return res, nil
}

// read sends a call without a key — a read, or a naturally idempotent write — and decodes
// its answer.
func read[T any](ctx context.Context, c *Client, method, path string, body any) (T, error) {
	var v T
	resp, err := c.Do(ctx, Request{Method: method, Path: path, Body: body})
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal(resp.Body, &v); err != nil {
		return v, fmt.Errorf("client: %s %s: decoding the answer: %w", method, path, err)
	}
	return v, nil
}
