package account

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/oncepay/oncepay/internal/idempotent"
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
	guard     *idempotent.Guard
	secret    string
}

// NewHandler returns the account HTTP handler: users authenticate callers, guard makes the
// writes exactly-once, and secret checks the channels' signatures.
func NewHandler(recharges *Recharges, users *Users, guard *idempotent.Guard, secret string) *Handler {
	return &Handler{recharges: recharges, users: users, guard: guard, secret: secret}
}

// RechargeRoutes serves the recharge routes, mounted at /v1/recharges. Each chain reads top
// to bottom:
//
//   - POST /notify: the channel's signature on the raw body, then the idempotency layers keyed
//     by channel + trade_no (NotifyKey), then Recharges.Notify inside the dedup transaction,
//     where the state precondition and the ledger's unique key hold (I2);
//   - POST /: the user, then the idempotency layers keyed by the caller's Idempotency-Key;
//   - GET /{recharge_id}: the user; reading is naturally idempotent.
func (h *Handler) RechargeRoutes() chi.Router {
	r := chi.NewRouter()
	r.With(web.RequireSignature(h.secret), h.guard.Middleware(NotifyKey)).Post("/notify", h.notify)
	r.Group(func(r chi.Router) {
		r.Use(web.RequireUser(h.users))
		r.With(h.guard.Middleware(idempotent.HeaderKeyFunc("recharge.create", web.UserScope))).Post("/", h.createRecharge)
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

// NotifyKey is the idempotency KeyFunc of POST /v1/recharges/notify: the channel's own
// business key, channel + trade_no, never a header or a request id, so that every copy of one
// payment (channel retry, gateway retry, redelivery) converges on one dedup record (I1, I2).
//
// A notification whose status is not SUCCESS is keyed apart (trade_no#STATUS): it changes
// nothing, and keyed on trade_no alone its stored answer would make the later SUCCESS of the
// same trade_no a key reused with another body (422) — a payment never credited.
func NotifyKey(r *http.Request, body []byte) (idempotent.Key, error) {
	var n Notification
	if err := json.Unmarshal(body, &n); err != nil {
		return idempotent.Key{}, apperr.ErrInvalidRequest.Withf("invalid JSON body: %v", err)
	}
	if n.Channel == "" || len(n.Channel) > 64 || n.TradeNo == "" || len(n.TradeNo) > 128 || len(n.Status) > 32 {
		return idempotent.Key{}, apperr.ErrInvalidRequest.Withf("channel (1..64 characters) and trade_no (1..128) are required")
	}
	key := idempotent.Key{Scope: "channel:" + n.Channel, BizType: "recharge.notify", BizKey: n.TradeNo}
	if n.Status != ChannelStatusSuccess {
		key.BizKey += "#" + n.Status
	}
	return key, nil
}

// createRecharge serves POST /v1/recharges {"amount":N}: 201 with the PENDING recharge.
func (h *Handler) createRecharge(w http.ResponseWriter, r *http.Request) {
	userID, ok := web.UserID(r.Context())
	if !ok {
		web.WriteError(w, r, apperr.ErrUnauthorized)
		return
	}
	var req struct {
		Amount *int64 `json:"amount"`
	}
	if err := web.Decode(r, &req); err != nil {
		web.WriteError(w, r, err)
		return
	}
	if req.Amount == nil {
		web.WriteError(w, r, ErrInvalidAmount)
		return
	}
	rc, err := h.recharges.Create(r.Context(), userID, *req.Amount)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/recharges/"+ids.Format(rc.ID))
	web.WriteJSON(w, http.StatusCreated, rechargeView(rc))
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

// notify serves POST /v1/recharges/notify, a channel's signed notification: 200
// {"result":"success"} for a success, a duplicate, or a status that is not SUCCESS. When the
// recharge had already moved on, the answer carries Idempotency-Outcome: state_rejected, so
// that a drill can tell the state precondition answered.
func (h *Handler) notify(w http.ResponseWriter, r *http.Request) {
	var n Notification
	if err := web.Decode(r, &n); err != nil {
		web.WriteError(w, r, err)
		return
	}
	if err := n.Validate(); err != nil {
		web.WriteError(w, r, err)
		return
	}
	outcome, err := h.recharges.Notify(r.Context(), n)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	if outcome.StateRejected() {
		w.Header().Set(idempotent.HeaderOutcome, string(idempotent.StateRejected))
	}
	web.WriteJSON(w, http.StatusOK, map[string]string{"result": "success"})
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
