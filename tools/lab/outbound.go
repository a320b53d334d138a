package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// The outbound half of the lab: oncepay's calls to the payment channel, done the naive way.
// Both replicas act on the same orders, stock and channel (the embedded simulator) as the
// real routes, and each is the bug of one incident.

// naiveRefundTimeout is how long the naive refund waits for the channel before it decides the
// call "failed" (I8). It is short on purpose: the drill's simulator holds the answer of an
// applied call until the caller gives up (timeout_after_apply).
const naiveRefundTimeout = time.Second

// naiveRefundAttempts is how many times the naive refund tries, each time under a NEW number.
const naiveRefundAttempts = 2

// naiveRefundAttempt is one call of the naive refund, as the lab reports it: the number it
// sent, and the channel's status and problem code (refund_exceeds, say), or why it got none.
type naiveRefundAttempt struct {
	OutRefundNo string `json:"out_refund_no"`
	Amount      int64  `json:"amount,omitempty"`
	Status      int    `json:"status,omitempty"`
	Code        string `json:"code,omitempty"`
	Error       string `json:"error,omitempty"`
}

// refundNewNumberOnTimeout is the BUG of I8: a refund whose channel call timed out is taken
// for "failed" and sent again under a NEW out_refund_no — the number is made per call, not
// committed with a refund row before the call. The channel had applied the first call (only
// its answer was lost); it is idempotent by out_refund_no, and the new number is a new refund:
// the buyer is refunded twice. Nothing is recorded locally either, so no job could resume it.
// POST /lab/orders/{order_id}/refunds {"amount": n}, as the order's user.
func (l *Lab) refundNewNumberOnTimeout(w http.ResponseWriter, r *http.Request) {
	id, ok := ids.Parse(chi.URLParam(r, "order_id"))
	if !ok {
		web.WriteError(w, r, apperr.ErrNotFound)
		return
	}
	var req struct {
		Amount int64  `json:"amount"`
		Reason string `json:"reason"`
	}
	if err := web.Decode(r, &req); err != nil {
		web.WriteError(w, r, err)
		return
	}
	ctx := r.Context()
	userID, _ := web.UserID(ctx)
	o, err := l.orders.Lookup(ctx, l.db, id)
	if err != nil || o.UserID != userID {
		web.WriteError(w, r, apperr.ErrNotFound)
		return
	}
	if req.Amount < 1 || req.Amount > o.Amount {
		web.WriteError(w, r, apperr.ErrInvalidRequest.Withf("amount must be 1..%d", o.Amount))
		return
	}
	base, err := l.channelURL(ctx, id)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	var attempts []naiveRefundAttempt
	for range naiveRefundAttempts {
		// The BUG: a fresh number for every call. The right way commits one number with the
		// refund row before the first call and reuses it on every retry.
		a := naiveRefundAttempt{OutRefundNo: "LAB-RF-" + ids.Format(l.ids.Next())}
		body, _ := json.Marshal(map[string]any{"out_refund_no": a.OutRefundNo, "out_trade_no": ids.Format(id), "amount": req.Amount})
		var ans channelAnswer
		ans, err = l.callChannel(ctx, base+"/channel/v1/refunds", body)
		a.Status, a.Code = ans.Status, ans.Code
		if err != nil {
			a.Error = err.Error()
		}
		attempts = append(attempts, a)
		if err == nil && a.Status < 500 {
			web.WriteJSON(w, http.StatusOK, map[string]any{"refunded": a.Status == http.StatusOK, "attempts": attempts})
			return
		}
		// "It timed out, so it failed": try again, under a new number.
	}
	web.WriteJSON(w, http.StatusGatewayTimeout, map[string]any{"refunded": false, "attempts": attempts})
}

// channelAnswer is what the channel answered one call of the lab: its status and, for an
// error, the problem code (trade_closed, refund_exceeds, …).
type channelAnswer struct {
	Status int
	Code   string
}

// callChannel posts a body (nil for none) to the channel, signed as the channel API wants
// (X-Signature: the HMAC-SHA256 of the body), with the naive refund's short timeout, and
// returns the answer; a timeout is an error.
func (l *Lab) callChannel(ctx context.Context, target string, body []byte) (channelAnswer, error) {
	ctx, cancel := context.WithTimeout(ctx, naiveRefundTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return channelAnswer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(web.HeaderSignature, web.Sign(l.secret, body))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return channelAnswer{}, err
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 1<<16))
	ans := channelAnswer{Status: res.StatusCode}
	if ans.Status >= 400 {
		var p struct {
			Code string `json:"code"`
		}
		if json.Unmarshal(raw, &p) == nil {
			ans.Code = p.Code
		}
	}
	return ans, nil
}

// channelURL is the channel's base URL: ChannelURL when the app set it, otherwise the scheme
// and host of the pay_url the channel gave for order id's trade (the embedded simulator puts
// its own base URL there). Not part of any bug: the lab only needs to reach the same channel.
func (l *Lab) channelURL(ctx context.Context, id int64) (string, error) {
	if l.ChannelURL != "" {
		return strings.TrimRight(l.ChannelURL, "/"), nil
	}
	var payURL *string
	err := l.db.WithContext(ctx).Table("trades").Where("order_id = ?", id).Select("pay_url").Scan(&payURL).Error
	if err != nil {
		return "", err
	}
	if payURL == nil || *payURL == "" {
		return "", apperr.New(http.StatusConflict, "illegal_state", "the order has no channel trade: open it with POST /v1/orders/{order_id}/payments first")
	}
	u, err := url.Parse(*payURL)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("lab: the trade's pay_url %q names no channel host", *payURL)
	}
	return u.Scheme + "://" + u.Host, nil
}

// closeExpiredWithoutAsking is the BUG of I9: the close job of one expired order that looks
// only at oncepay's own data — PENDING_PAYMENT and past expires_at, so "unpaid" — and closes
// it, returning its stock, without asking the channel. When the payment's notifications were
// lost, the buyer has paid and the channel holds the money while the order is CLOSED. (The
// UPDATE has its state precondition: the bug is only the question it never asks.)
// POST /lab/orders/{order_id}/close-expired, admin.
func (l *Lab) closeExpiredWithoutAsking(w http.ResponseWriter, r *http.Request) {
	id, ok := ids.Parse(chi.URLParam(r, "order_id"))
	if !ok {
		web.WriteError(w, r, apperr.ErrNotFound)
		return
	}
	ctx := r.Context()
	o, err := l.orders.Lookup(ctx, l.db, id)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	now := time.Now().UTC()
	if o.Status != order.PendingPayment || now.Before(o.ExpiresAt) {
		web.WriteJSON(w, http.StatusOK, map[string]any{"closed": false, "order": order.ViewOf(o)})
		return
	}
	// The BUG: no query of the channel's trade, no close of the trade there first.
	closed := false
	err = l.write(ctx, func(db *gorm.DB) error {
		return db.Transaction(func(tx *gorm.DB) error {
			res := tx.Table("orders").Where("id = ? AND status = ?", id, order.PendingPayment).
				Updates(map[string]any{"status": "CLOSED", "updated_at": now})
			if res.Error != nil || res.RowsAffected == 0 {
				return res.Error
			}
			closed = true
			for _, it := range o.Items {
				err := tx.Table("inventory").Where("sku = ?", it.SKU).Updates(map[string]any{
					"available": gorm.Expr("available + ?", it.Quantity), "reserved": gorm.Expr("reserved - ?", it.Quantity),
				}).Error
				if err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	o, err = l.orders.Lookup(ctx, l.db, id)
	if err != nil && !errors.Is(err, gorm.ErrRecordNotFound) {
		web.WriteError(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, map[string]any{"closed": closed, "order": order.ViewOf(o)})
}
