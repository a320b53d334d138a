package refund

import (
	"context"
	"log/slog"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/httpkey"
	idem "github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// View is the JSON form of a refund (docs/contract.md).
type View struct {
	RefundID    string  `json:"refund_id"`
	OrderID     string  `json:"order_id,omitempty"`
	RechargeID  string  `json:"recharge_id,omitempty"`
	Amount      int64   `json:"amount"`
	Reason      string  `json:"reason"`
	Status      Status  `json:"status"`
	OutRefundNo string  `json:"out_refund_no"`
	RefundNo    *string `json:"refund_no"`
	// ChannelStatus is what the channel said last about the refund (Refund.ChannelStatus).
	ChannelStatus *string `json:"channel_status,omitempty"`
	CreatedAt     string  `json:"created_at"`
	UpdatedAt     string  `json:"updated_at"`
}

// ViewOf renders r for the API.
func ViewOf(r Refund) View {
	v := View{
		RefundID: ids.Format(r.ID), Amount: r.Amount, Reason: r.Reason, Status: r.Status,
		OutRefundNo: r.OutRefundNo, RefundNo: r.RefundNo, ChannelStatus: r.ChannelStatus,
		CreatedAt: r.CreatedAt.UTC().Format(time.RFC3339), UpdatedAt: r.UpdatedAt.UTC().Format(time.RFC3339),
	}
	if r.OrderID != nil {
		v.OrderID = ids.Format(*r.OrderID)
	}
	if r.RechargeID != nil {
		v.RechargeID = ids.Format(*r.RechargeID)
	}
	return v
}

// Handler serves the refund routes.
type Handler struct {
	refunds *Service
	idem    httpkey.Handler
}

// NewHandler returns the refund HTTP handler; idem makes its writes exactly-once.
func NewHandler(refunds *Service, idem httpkey.Handler) *Handler {
	return &Handler{refunds: refunds, idem: idem}
}

// Routes serves GET /{refund_id} behind user authentication (requireUser) and POST /notify,
// the inbound port's handler of refund reports, marked idempotent by the report's own number
// (idem.ReportKeyed), mounted at /v1/refunds.
func (h *Handler) Routes(requireUser func(http.Handler) http.Handler, reports http.Handler) chi.Router {
	r := chi.NewRouter()
	r.Method(http.MethodPost, "/notify", idem.ReportKeyed(reports))
	r.With(requireUser).Get("/{refund_id}", h.get)
	return r
}

type createRequest struct {
	Amount *int64 `json:"amount"`
	Reason string `json:"reason"`
}

// Create is POST /v1/orders/{order_id}/refunds, mounted with idem.KeyRequired, which reads its
// key. Top to bottom: the key, the body decoded and validated, then the guard's transaction
// that commits the refund PENDING with its out_refund_no (the recovery point, I8) and stores
// the 201; only after that commit, still under the key's lease (After), is the channel called
// (Submit). The answer is the stored one — the refund as committed — so a replay answers the
// same bytes and calls nothing; GET /v1/refunds/{refund_id} shows where it went since.
func (h *Handler) Create(w http.ResponseWriter, r *http.Request, key idempotent.Key) {
	body, req, err := decodeCreate(r)
	if err != nil {
		h.idem.Reject(w, r, err)
		return
	}
	userID, _ := web.UserID(r.Context())
	var created Refund
	guarded := h.idem.Request(r, key, body)
	guarded.After = func(ctx context.Context, _ idempotent.Result) {
		// Committed: now, and only now, the channel hears of it. A failure here is not the
		// client's: the row stays PENDING and resume-refunds calls again with its number.
		if _, err := h.refunds.Submit(context.WithoutCancel(ctx), created); err != nil {
			slog.WarnContext(ctx, "refund submitted later by resume-refunds", "refund_id", created.ID, "err", err)
		}
	}
	_, _ = h.idem.Run(w, r, guarded, func(ctx context.Context, tx *gorm.DB, record func(idempotent.Response) error) error {
		id, ok := ids.Parse(chi.URLParam(r, "order_id"))
		if !ok {
			return order.ErrNotFound
		}
		rf, err := h.refunds.Create(ctx, tx, userID, id, req.Amount, req.Reason, func(rf Refund) error {
			return record(idem.JSON(http.StatusCreated, ViewOf(rf), "Location", "/v1/refunds/"+ids.Format(rf.ID)))
		})
		created = rf
		return err
	})
}

// decodeCreate reads and validates the body of POST /v1/orders/{order_id}/refunds; an empty
// body asks for the whole remaining amount.
func decodeCreate(r *http.Request) ([]byte, createRequest, error) {
	var req createRequest
	body, err := web.ReadBody(r)
	if err != nil {
		return nil, req, err
	}
	if len(body) > 0 {
		if err := web.DecodeBytes(body, &req); err != nil {
			return nil, req, err
		}
	}
	switch {
	case req.Amount != nil && (*req.Amount < 1 || *req.Amount > order.MaxAmount):
		return nil, req, ErrInvalidAmount
	case len(req.Reason) > 255 || !utf8.ValidString(req.Reason):
		return nil, req, apperr.ErrInvalidRequest.Withf("reason must be at most 255 bytes of UTF-8")
	}
	return body, req, nil
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request) {
	id, ok := ids.Parse(chi.URLParam(r, "refund_id"))
	if !ok {
		web.WriteError(w, r, ErrNotFound)
		return
	}
	userID, _ := web.UserID(r.Context())
	rf, err := h.refunds.Get(r.Context(), userID, id)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, ViewOf(rf))
}
