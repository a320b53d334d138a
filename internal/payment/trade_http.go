package payment

import (
	"context"
	"net/http"

	"github.com/go-chi/chi/v5"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/httpkey"
	"github.com/oncepay/oncepay/internal/channel"
	idem "github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// TradeHandler serves POST /v1/orders/{order_id}/payments.
type TradeHandler struct {
	trades *Trades
	idem   httpkey.Handler
}

// NewTradeHandler returns the handler that opens channel trades; idem makes it exactly-once.
func NewTradeHandler(trades *Trades, idem httpkey.Handler) *TradeHandler {
	return &TradeHandler{trades: trades, idem: idem}
}

// Pay is POST /v1/orders/{order_id}/payments, mounted with idem.KeyRequired, which reads its
// key. Top to bottom: the key, an empty body (or {}), then the guard — which claims the key
// before anything else happens (I12) — runs its two phases. Before, under the key's lease and
// outside any transaction, the trade is opened at the channel (Trades.Open: the OPENING row
// committed first, then the call, idempotent by out_trade_no = the order id); then the guard's
// transaction records the channel's answer and stores the 201. A refused request (400, 409 in
// flight, 422 reused) opens nothing, and a replay answers from the stored outcome without
// calling the channel. A refusal of the open (404, 409 illegal_state) is stored like an answer;
// a channel that did not answer is a 503 that stores nothing, so the retry with the same key
// asks the channel again with the same number.
func (h *TradeHandler) Pay(w http.ResponseWriter, r *http.Request, key idempotent.Key) {
	body, err := web.ReadBody(r)
	if err == nil && len(body) > 0 {
		err = web.DecodeBytes(body, &struct{}{})
	}
	if err != nil {
		h.idem.Reject(w, r, err)
		return
	}
	userID, _ := web.UserID(r.Context())
	id, ok := ids.Parse(chi.URLParam(r, "order_id"))
	var ct channel.Trade
	req := h.idem.Request(r, key, body)
	req.Before = func(ctx context.Context) error {
		if !ok {
			return order.ErrNotFound
		}
		var err error
		ct, err = h.trades.Open(ctx, userID, id)
		return err
	}
	_, _ = h.idem.Run(w, r, req, func(ctx context.Context, tx *gorm.DB, record func(idempotent.Response) error) error {
		return h.trades.Record(ctx, tx, id, ct, func(view TradeView) error {
			return record(idem.JSON(http.StatusCreated, view))
		})
	})
}
