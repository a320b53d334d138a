package jobs

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// Handler runs the jobs on demand.
type Handler struct {
	orders    *order.Service
	guard     *idempotent.Guard
	retention time.Duration
	channel   Channel
	backfill  func(context.Context) (int64, error)
}

// NewHandler returns the admin jobs handler; retention is the configured dedup retention, ch
// the jobs that talk to the payment channel, and backfill posts the books of the money that
// moved before them (ledger.Books.Backfill).
func NewHandler(orders *order.Service, guard *idempotent.Guard, retention time.Duration, ch Channel, backfill func(context.Context) (int64, error)) *Handler {
	return &Handler{orders: orders, guard: guard, retention: retention, channel: ch, backfill: backfill}
}

// AdminRoutes serves the job runs, mounted at /v1/admin/jobs behind the admin key.
func (h *Handler) AdminRoutes() chi.Router {
	r := chi.NewRouter()
	r.Post("/close-expired-orders/run", h.closeExpired)
	r.Post("/purge-dedup-records/run", h.purge)
	r.Post("/reconcile-payments/run", h.reconcilePayments)
	r.Post("/resume-refunds/run", h.resumeRefunds)
	r.Post("/reconcile-bills/run", h.reconcileBills)
	r.Post("/backfill-ledger/run", h.backfillLedger)
	return r
}

// backfillLedger posts the transfers that money moved before the books existed is missing;
// a second run posts nothing.
func (h *Handler) backfillLedger(w http.ResponseWriter, r *http.Request) {
	n, err := h.backfill(r.Context())
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, map[string]int64{"posted": n})
}

func (h *Handler) closeExpired(w http.ResponseWriter, r *http.Request) {
	n, err := CloseExpiredOrders(h.orders, h.channel.Trades.BeforeClose)(r.Context())
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, map[string]int64{"closed": n})
}

type purgeRequest struct {
	OlderThan *string `json:"older_than"`
}

// purge runs the purge with the configured retention, or with an explicit older_than for
// this one run — how drills reproduce I6 — which is logged as a warning.
func (h *Handler) purge(w http.ResponseWriter, r *http.Request) {
	var req purgeRequest
	body, err := web.ReadBody(r)
	if err == nil && len(body) > 0 {
		err = web.DecodeBytes(body, &req)
	}
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	olderThan := h.retention
	if req.OlderThan != nil {
		d, err := time.ParseDuration(*req.OlderThan)
		if err != nil || d < 0 {
			web.WriteError(w, r, apperr.ErrInvalidRequest.Withf("older_than must be a duration such as 0s or 72h"))
			return
		}
		slog.WarnContext(r.Context(), "purging dedup records with an explicit older_than: copies redelivered later pass the dedup table and only the state preconditions stop them (I6)",
			"older_than", d.String(), "configured_retention", h.retention.String())
		olderThan = d
	}
	n, err := h.guard.Purge(r.Context(), idempotent.PurgeOptions{OlderThan: olderThan})
	if errors.Is(err, idempotent.ErrPurgeIncomplete) {
		web.WriteError(w, r, apperr.ErrUnavailable.Withf("purged %d records, then stopped: their replay cache entries could not be dropped (Redis unavailable); the remaining records are kept, run again later", n))
		return
	}
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, map[string]int64{"purged": n})
}
