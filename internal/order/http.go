package order

import (
	"errors"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// View is the JSON form of an order (CONTRACT.md).
type View struct {
	OrderID   string     `json:"order_id"`
	UserID    string     `json:"user_id"`
	Status    Status     `json:"status"`
	Amount    int64      `json:"amount"`
	Currency  string     `json:"currency"`
	Items     []ItemView `json:"items"`
	CreatedAt string     `json:"created_at"`
	ExpiresAt string     `json:"expires_at"`
	PaidAt    *string    `json:"paid_at"`
	TradeNo   *string    `json:"trade_no"`
}

// ItemView is the JSON form of an order item.
type ItemView struct {
	SKU      string `json:"sku"`
	Quantity int64  `json:"quantity"`
	Price    int64  `json:"price"`
}

// ViewOf renders o for the API.
func ViewOf(o Order) View {
	v := View{
		OrderID: ids.Format(o.ID), UserID: ids.Format(o.UserID), Status: o.Status, Amount: o.Amount,
		Currency: o.Currency, Items: make([]ItemView, len(o.Items)),
		CreatedAt: o.CreatedAt.UTC().Format(time.RFC3339), ExpiresAt: o.ExpiresAt.UTC().Format(time.RFC3339),
		TradeNo: o.TradeNo,
	}
	for i, it := range o.Items {
		v.Items[i] = ItemView{SKU: it.SKU, Quantity: it.Quantity, Price: it.Price}
	}
	if o.PaidAt != nil {
		s := o.PaidAt.UTC().Format(time.RFC3339)
		v.PaidAt = &s
	}
	return v
}

// Handler serves the order routes.
type Handler struct {
	orders *Service
	guard  *idempotent.Guard
}

// NewHandler returns the order HTTP handler.
func NewHandler(orders *Service, guard *idempotent.Guard) *Handler {
	return &Handler{orders: orders, guard: guard}
}

// Routes serves the order routes, mounted at /v1/orders behind user authentication. Create
// and cancel are forced-idempotent (Idempotency-Key required; a one-time tok_ key answers
// the double click, I7); get is naturally idempotent.
func (h *Handler) Routes() chi.Router {
	r := chi.NewRouter()
	r.With(h.guard.Middleware(idempotent.HeaderKeyFunc("order.create", web.UserScope))).Post("/", h.create)
	r.Get("/{order_id}", h.get)
	r.With(h.guard.Middleware(idempotent.HeaderKeyFunc("order.cancel", web.UserScope))).Post("/{order_id}/cancel", h.cancel)
	return r
}

type createRequest struct {
	Items []struct {
		SKU      string `json:"sku"`
		Quantity int64  `json:"quantity"`
	} `json:"items"`
}

func (h *Handler) create(w http.ResponseWriter, r *http.Request) {
	var req createRequest
	if err := web.Decode(r, &req); err != nil {
		web.WriteError(w, r, err)
		return
	}
	lines := make([]Line, len(req.Items))
	for i, it := range req.Items {
		lines[i] = Line{SKU: it.SKU, Quantity: it.Quantity}
	}
	userID, _ := web.UserID(r.Context())
	o, err := h.orders.Create(r.Context(), userID, lines)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/orders/"+ids.Format(o.ID))
	web.WriteJSON(w, http.StatusCreated, ViewOf(o))
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

func (h *Handler) cancel(w http.ResponseWriter, r *http.Request) {
	id, ok := ids.Parse(chi.URLParam(r, "order_id"))
	if !ok {
		web.WriteError(w, r, ErrNotFound)
		return
	}
	userID, _ := web.UserID(r.Context())
	o, err := h.orders.Cancel(r.Context(), userID, id)
	if err != nil {
		if errors.Is(err, ErrIllegalState) {
			w.Header().Set(idempotent.HeaderOutcome, string(idempotent.StateRejected))
		}
		web.WriteError(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, ViewOf(o))
}
