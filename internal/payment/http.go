package payment

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// Handler serves POST /v1/payments/notify.
type Handler struct {
	payments *Service
	guard    *idempotent.Guard
	secret   string
}

// NewHandler returns the payment HTTP handler; notifications are signed with secret.
func NewHandler(payments *Service, guard *idempotent.Guard, secret string) *Handler {
	return &Handler{payments: payments, guard: guard, secret: secret}
}

// Routes serves POST /notify, mounted at /v1/payments. The chain reads top to bottom: the
// signature is checked on the raw body, then the idempotency layers key the notification by
// channel + trade_no (the same key the Kafka consumer uses, I1), then Apply runs inside the
// dedup transaction.
func (h *Handler) Routes() chi.Router {
	r := chi.NewRouter()
	r.With(
		web.RequireSignature(h.secret),
		h.guard.Middleware(notificationKey),
	).Post("/notify", h.notify)
	return r
}

// notificationKey keys a notification by its business meaning, channel + trade_no.
func notificationKey(_ *http.Request, body []byte) (idempotent.Key, error) {
	n, err := Parse(body)
	if err != nil {
		return idempotent.Key{}, err
	}
	return n.Key(), nil
}

func (h *Handler) notify(w http.ResponseWriter, r *http.Request) {
	body, err := web.ReadBody(r)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	n, err := Parse(body)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	result, err := h.payments.Apply(r.Context(), n)
	if result == Refused || result == AlreadyPaid {
		w.Header().Set(idempotent.HeaderOutcome, string(idempotent.StateRejected))
	}
	resp, err := Respond(err)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	for k, v := range resp.Header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}
