package payment

import (
	"errors"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/idemhttp"
	"github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// Handler serves POST /v1/payments/notify.
type Handler struct {
	payments *Service
	idem     *idemhttp.Adapter
	secret   string
}

// NewHandler returns the payment HTTP handler; notifications are signed with secret.
func NewHandler(payments *Service, idem *idemhttp.Adapter, secret string) *Handler {
	return &Handler{payments: payments, idem: idem, secret: secret}
}

// Routes serves POST /notify, mounted at /v1/payments, behind the channel's signature on the
// raw body.
func (h *Handler) Routes() chi.Router {
	r := chi.NewRouter()
	r.With(web.RequireSignature(h.secret)).Post("/notify", h.notify)
	return r
}

// notify reads top to bottom: the notification parsed and validated completely (a malformed
// one gets 400 and stores nothing, so the channel's correct copy still applies), then keyed
// by its business meaning, channel + trade_no — the same key the Kafka consumer uses (I1) —
// and applied once through the guard. A copy the guard refuses as a key reused with another
// body is a trade_conflict (422, recorded as an anomaly) when it names another order than the
// one the trade belongs to, and an idempotency_key_reused (422) otherwise.
func (h *Handler) notify(w http.ResponseWriter, r *http.Request) {
	body, err := web.ReadBody(r)
	if err != nil {
		idemhttp.Reject(w, r, err)
		return
	}
	n, err := Parse(body)
	if err != nil {
		idemhttp.Reject(w, r, err)
		return
	}
	res, err := h.idem.Guard().Do(r.Context(), idemhttp.Request(r, n.Key(), body), h.payments.Work(n))
	if errors.Is(err, idempotent.ErrKeyReused) {
		conflict, cerr := h.payments.TradeConflict(r.Context(), n)
		switch {
		case cerr != nil:
			res, err = idempotent.Result{}, cerr
		case conflict:
			err = anomaly.ErrTradeConflict
		}
	}
	idemhttp.Write(w, r, res, err)
}
