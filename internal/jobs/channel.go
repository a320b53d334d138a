package jobs

import (
	"context"
	"net/http"
	"time"

	"github.com/oncepay/oncepay/internal/payment"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/web"
	"github.com/oncepay/oncepay/internal/refund"
)

// Channel are the jobs that talk to the payment channel.
type Channel struct {
	// Trades asks the channel about trades: the close job (I9) and reconcile-payments.
	Trades *payment.Trades
	// Refunds finishes refunds from their recovery points (I8).
	Refunds *refund.Service
	// Bills reconciles the daily bill.
	Bills *Bills
}

// ReconcilePayments asks the channel about every PENDING_PAYMENT order that has a trade, and
// about the PENDING recharges of the last day, and applies a SUCCESS through the report's own
// path and key (I9); it returns how many orders it paid and recharges it credited.
func ReconcilePayments(trades *payment.Trades) func(ctx context.Context) (int64, error) {
	return func(ctx context.Context) (int64, error) {
		_, paid, err := trades.Reconcile(ctx)
		if err != nil {
			return paid, err
		}
		_, credited, err := trades.ReconcileRecharges(ctx)
		return paid + credited, err
	}
}

func (h *Handler) reconcilePayments(w http.ResponseWriter, r *http.Request) {
	checked, applied, err := h.channel.Trades.Reconcile(r.Context())
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	rchecked, rapplied, err := h.channel.Trades.ReconcileRecharges(r.Context())
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, map[string]int64{"checked": checked, "applied": applied,
		"recharges_checked": rchecked, "recharges_applied": rapplied})
}

func (h *Handler) resumeRefunds(w http.ResponseWriter, r *http.Request) {
	n, err := h.channel.Refunds.Resume(r.Context())
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, map[string]int64{"resumed": n})
}

type billsRequest struct {
	Date string `json:"date"`
}

// reconcileBills is POST /v1/admin/jobs/reconcile-bills/run {"date":"YYYY-MM-DD"}.
func (h *Handler) reconcileBills(w http.ResponseWriter, r *http.Request) {
	var req billsRequest
	body, err := web.ReadBody(r)
	if err == nil {
		err = web.DecodeBytes(body, &req)
	}
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	day, err := time.Parse(time.DateOnly, req.Date)
	if err != nil {
		web.WriteError(w, r, apperr.ErrInvalidRequest.Withf("date must be YYYY-MM-DD, such as 2026-01-31"))
		return
	}
	rep, err := h.channel.Bills.Reconcile(r.Context(), day)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, rep)
}
