package order

import (
	"context"
	"net/http"

	"github.com/go-chi/chi/v5"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/httpkey"
	idem "github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// Handler serves the order routes.
type Handler struct {
	orders *Service
	idem   httpkey.Handler
	trades TradeGate
}

// TradeGate is what a cancel asks of the payment channel (payment.Trades implements it): the
// order's channel trade must be unpayable before the order is cancelled, or the buyer could
// pay a cancelled order whose notifications may all be lost (I9).
type TradeGate interface {
	// BeforeCancel runs before the cancel's transaction, under the cancel's key, since it
	// calls the channel: it closes userID's order id's trade there, or applies its payment
	// when the buyer already paid (the cancel then finds the order PAID).
	BeforeCancel(ctx context.Context, userID, id int64) error
	// CheckCancel runs in the cancel's transaction, the order row locked: it refuses the
	// cancel when a trade was opened since BeforeCancel.
	CheckCancel(ctx context.Context, tx *gorm.DB, id int64) error
}

// NewHandler returns the order HTTP handler; idem makes its writes exactly-once and trades
// closes an order's channel trade before a cancel.
func NewHandler(orders *Service, idem httpkey.Handler, trades TradeGate) *Handler {
	return &Handler{orders: orders, idem: idem, trades: trades}
}

// Routes serves the order routes, mounted at /v1/orders behind user authentication. Create
// and cancel are forced-idempotent, marked so (idem.KeyRequired: an Idempotency-Key is
// required; a one-time tok_ key answers the double click, I7); get is naturally idempotent.
func (h *Handler) Routes() chi.Router {
	r := chi.NewRouter()
	r.Method(http.MethodPost, "/", idem.KeyRequired(h.idem, h.create))
	r.Get("/{order_id}", h.get)
	r.Method(http.MethodPost, "/{order_id}/cancel", idem.KeyRequired(h.idem, h.cancel))
	return r
}

type createRequest struct {
	Items []struct {
		SKU      string `json:"sku"`
		Quantity int64  `json:"quantity"`
	} `json:"items"`
}

// create is POST /v1/orders, top to bottom: the key (read by the route's mark), the body
// decoded and validated (a bad one stores nothing), then one transaction through the guard —
// Service.Create: the order's new rows, the dedup record, the stock reserved last — and the
// answer written after the commit. Not enough stock rolls the order back and answers
// out_of_stock, stored.
func (h *Handler) create(w http.ResponseWriter, r *http.Request, key idempotent.Key) {
	body, err := web.ReadBody(r)
	if err != nil {
		h.idem.Reject(w, r, err)
		return
	}
	lines, err := decodeCreate(body)
	if err != nil {
		h.idem.Reject(w, r, err)
		return
	}
	userID, _ := web.UserID(r.Context())
	_, _ = h.idem.Do(w, r, key, body, func(ctx context.Context, tx *gorm.DB, record func(idempotent.Response) error) error {
		_, err := h.orders.Create(ctx, tx, userID, lines, func(o Order) error {
			return record(idem.JSON(http.StatusCreated, ViewOf(o), "Location", "/v1/orders/"+ids.Format(o.ID)))
		})
		return err
	})
}

// decodeCreate decodes and validates the body of POST /v1/orders.
func decodeCreate(body []byte) ([]Line, error) {
	var req createRequest
	if err := web.DecodeBytes(body, &req); err != nil {
		return nil, err
	}
	lines := make([]Line, len(req.Items))
	for i, it := range req.Items {
		lines[i] = Line{SKU: it.SKU, Quantity: it.Quantity}
	}
	return lines, Validate(lines)
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request) {
	id, ok := ids.Parse(chi.URLParam(r, "order_id"))
	if !ok {
		web.WriteError(w, r, ErrNotFound)
		return
	}
	userID, _ := web.UserID(r.Context())
	o, err := h.orders.Get(r.Context(), userID, id)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, ViewOf(o))
}

// cancel is POST /v1/orders/{id}/cancel, top to bottom: the key (read by the route's mark),
// then the guard — which claims the key before anything else happens (I12) — runs its two
// phases. Before, under the key's lease and outside any transaction, the order's channel trade
// is made unpayable (TradeGate.BeforeCancel: closed at the channel, or its payment applied);
// then the guard's transaction makes the conditional transition and checks that no trade was
// opened meanwhile. A refused cancel (400, 409 in flight, 422 reused) touches nothing, at the
// channel neither, and a replay answers from the stored outcome. An order that moved on (paid,
// say) answers 409 illegal_state, stored and replayed; a channel that did not answer is a 503
// that stores nothing, so the retry with the same key asks it again.
func (h *Handler) cancel(w http.ResponseWriter, r *http.Request, key idempotent.Key) {
	body, err := web.ReadBody(r)
	if err == nil && len(body) > 0 {
		err = web.DecodeBytes(body, &struct{}{}) // a cancel carries nothing: empty, or {}
	}
	if err != nil {
		h.idem.Reject(w, r, err)
		return
	}
	userID, _ := web.UserID(r.Context())
	id, ok := ids.Parse(chi.URLParam(r, "order_id"))
	req := h.idem.Request(r, key, body)
	req.Before = func(ctx context.Context) error {
		if !ok {
			return ErrNotFound
		}
		return h.trades.BeforeCancel(ctx, userID, id)
	}
	_, _ = h.idem.Run(w, r, req, func(ctx context.Context, tx *gorm.DB, record func(idempotent.Response) error) error {
		_, err := h.orders.Cancel(ctx, tx, userID, id, func(o Order) error {
			return record(idem.JSON(http.StatusOK, ViewOf(o)))
		})
		if err != nil {
			return err
		}
		return h.trades.CheckCancel(ctx, tx, id)
	})
}
