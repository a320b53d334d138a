package account

import (
	"context"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/httpkey"
	idem "github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// Currency is the only currency oncepay handles; money is an integer number of cents.
const Currency = "CNY"

// RechargeView is the JSON form of a Recharge. Ids travel as strings.
type RechargeView struct {
	RechargeID  string `json:"recharge_id"`
	UserID      string `json:"user_id"`
	Status      string `json:"status"`
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	Channel     string `json:"channel,omitempty"`
	TradeNo     string `json:"trade_no,omitempty"`
	CreatedAt   string `json:"created_at"`
	SucceededAt string `json:"succeeded_at,omitempty"`
	// Transfer is the ledger transfer that credited the recharge (internal/ledger), once it
	// has succeeded.
	Transfer string `json:"transfer,omitempty"`
}

func rechargeView(rc Recharge) RechargeView {
	v := RechargeView{
		RechargeID: ids.Format(rc.ID), UserID: ids.Format(rc.UserID), Status: string(rc.Status),
		Amount: rc.Amount, Currency: Currency, Channel: deref(rc.Channel), TradeNo: deref(rc.TradeNo),
		CreatedAt: rc.CreatedAt.UTC().Format(time.RFC3339),
	}
	if rc.SucceededAt != nil {
		v.SucceededAt = rc.SucceededAt.UTC().Format(time.RFC3339)
	}
	if rc.Status == RechargeSucceeded && rc.Channel != nil && rc.TradeNo != nil {
		v.Transfer = ledger.TradeID(*rc.Channel, *rc.TradeNo)
	}
	return v
}

// AccountView is the JSON form of a user's account.
type AccountView struct {
	UserID   string `json:"user_id"`
	Balance  int64  `json:"balance"`
	Currency string `json:"currency"`
}

// Handler serves the recharge and account routes.
type Handler struct {
	recharges *Recharges
	users     *Users
	idem      httpkey.Handler
}

// NewHandler returns the account HTTP handler: users authenticate callers and idem makes the
// writes exactly-once.
func NewHandler(recharges *Recharges, users *Users, idem httpkey.Handler) *Handler {
	return &Handler{recharges: recharges, users: users, idem: idem}
}

// RechargeRoutes serves the recharge routes, mounted at /v1/recharges:
//
//   - POST /notify: reports, the inbound port's handler (notify.Port.Handler(notify.Recharge)),
//     marked idempotent by the report's own number (idem.ReportKeyed);
//   - POST /: the user, then createRecharge, marked as requiring an Idempotency-Key
//     (idem.KeyRequired);
//   - GET /{recharge_id}: the user; reading is naturally idempotent.
func (h *Handler) RechargeRoutes(reports http.Handler) chi.Router {
	r := chi.NewRouter()
	r.Method(http.MethodPost, "/notify", idem.ReportKeyed(reports))
	r.Group(func(r chi.Router) {
		r.Use(web.RequireUser(h.users))
		r.Method(http.MethodPost, "/", idem.KeyRequired(h.idem, h.createRecharge))
		r.Get("/{recharge_id}", h.getRecharge)
	})
	return r
}

// AccountRoutes serves GET /me, mounted at /v1/accounts: the caller's balance.
func (h *Handler) AccountRoutes() chi.Router {
	r := chi.NewRouter()
	r.With(web.RequireUser(h.users)).Get("/me", h.me)
	return r
}

// createRecharge serves POST /v1/recharges {"amount":N}: 201 with the PENDING recharge. The
// key (read by the route's mark) and the body are checked first; a bad one stores nothing.
func (h *Handler) createRecharge(w http.ResponseWriter, r *http.Request, key idempotent.Key) {
	body, err := web.ReadBody(r)
	if err != nil {
		h.idem.Reject(w, r, err)
		return
	}
	var req struct {
		Amount *int64 `json:"amount"`
	}
	if err := web.DecodeBytes(body, &req); err != nil {
		h.idem.Reject(w, r, err)
		return
	}
	if req.Amount == nil || *req.Amount < 1 || *req.Amount > MaxAmount {
		h.idem.Reject(w, r, ErrInvalidAmount)
		return
	}
	userID, _ := web.UserID(r.Context())
	_, _ = h.idem.Do(w, r, key, body, func(ctx context.Context, tx *gorm.DB, record func(idempotent.Response) error) error {
		_, err := h.recharges.Create(ctx, tx, userID, *req.Amount, func(rc Recharge) error {
			return record(idem.JSON(http.StatusCreated, rechargeView(rc), "Location", "/v1/recharges/"+ids.Format(rc.ID)))
		})
		return err
	})
}

// getRecharge serves GET /v1/recharges/{recharge_id}. An unknown, malformed or another
// user's id is 404 not_found alike, so that ids cannot be probed.
func (h *Handler) getRecharge(w http.ResponseWriter, r *http.Request) {
	userID, ok := web.UserID(r.Context())
	if !ok {
		web.WriteError(w, r, apperr.ErrUnauthorized)
		return
	}
	id, ok := ids.Parse(chi.URLParam(r, "recharge_id"))
	if !ok {
		web.WriteError(w, r, ErrRechargeNotFound)
		return
	}
	rc, err := h.recharges.Get(r.Context(), userID, id)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, rechargeView(rc))
}

// me serves GET /v1/accounts/me: the caller's balance. Reading is naturally idempotent.
func (h *Handler) me(w http.ResponseWriter, r *http.Request) {
	userID, ok := web.UserID(r.Context())
	if !ok {
		web.WriteError(w, r, apperr.ErrUnauthorized)
		return
	}
	balance, err := h.recharges.ledger.Balance(r.Context(), userID)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, AccountView{UserID: ids.Format(userID), Balance: balance, Currency: Currency})
}
