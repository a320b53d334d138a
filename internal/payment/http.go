package payment

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/oncepay/oncepay/internal/idemhttp"
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
// and applied once through the guard.
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
	_, _ = h.idem.Do(w, r, n.Key(), body, h.payments.Work(n))
}
