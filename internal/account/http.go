package account

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/idemhttp"
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
	idem      *idemhttp.Adapter
	secret    string
}

// NewHandler returns the account HTTP handler: users authenticate callers, idem makes the
// writes exactly-once, and secret checks the channels' signatures.
func NewHandler(recharges *Recharges, users *Users, idem *idemhttp.Adapter, secret string) *Handler {
	return &Handler{recharges: recharges, users: users, idem: idem, secret: secret}
}

// RechargeRoutes serves the recharge routes, mounted at /v1/recharges:
//
//   - POST /notify: the channel's signature on the raw body, then notify;
//   - POST /: the user, then createRecharge;
//   - GET /{recharge_id}: the user; reading is naturally idempotent.
func (h *Handler) RechargeRoutes() chi.Router {
	r := chi.NewRouter()
	r.With(web.RequireSignature(h.secret)).Post("/notify", h.notify)
	r.Group(func(r chi.Router) {
		r.Use(web.RequireUser(h.users))
		r.Post("/", h.createRecharge)
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

// NotifyKey is the idempotency key of a recharge notification: the channel's own business
// key, channel + trade_no, never a header or a request id, so that every copy of one payment
// (channel retry, gateway retry, redelivery) converges on one dedup record (I1, I2).
// A status other than SUCCESS is keyed apart (idemhttp.NotificationKey).
func (n Notification) NotifyKey() idempotent.Key {
	return idemhttp.NotificationKey(n.Channel, "recharge.notify", n.TradeNo, n.Status, ChannelStatusSuccess)
}

// createRecharge serves POST /v1/recharges {"amount":N}: 201 with the PENDING recharge. The
// key and the body are checked first; a bad one stores nothing.
func (h *Handler) createRecharge(w http.ResponseWriter, r *http.Request) {
	key, body, err := idemhttp.KeyAndBody(r)
	if err != nil {
		idemhttp.Reject(w, r, err)
		return
	}
	var req struct {
		Amount *int64 `json:"amount"`
	}
	if err := web.DecodeBytes(body, &req); err != nil {
		idemhttp.Reject(w, r, err)
		return
	}
	if req.Amount == nil || *req.Amount < 1 || *req.Amount > MaxAmount {
		idemhttp.Reject(w, r, ErrInvalidAmount)
		return
	}
	userID, _ := web.UserID(r.Context())
	_, _ = h.idem.Do(w, r, key, body, func(ctx context.Context, tx *gorm.DB) (idempotent.Response, error) {
		rc, err := h.recharges.Create(ctx, tx, userID, *req.Amount)
		if err != nil {
			return idempotent.Response{}, err
		}
		return idemhttp.JSON(http.StatusCreated, rechargeView(rc), "Location", "/v1/recharges/"+ids.Format(rc.ID)), nil
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

// notify serves POST /v1/recharges/notify, a channel's signed notification, validated
// completely before its key is claimed, so that a malformed copy (an unknown field, amount
// 0) gets 400 and stores nothing, and the correct one still credits. The answer is 200
// {"result":"success"} for a success, a duplicate, or a status that is not SUCCESS; when the
// recharge had already moved on it carries Idempotency-Outcome: state_rejected. The same
// channel + trade_no for another recharge is 422 trade_conflict, recorded as an anomaly.
func (h *Handler) notify(w http.ResponseWriter, r *http.Request) {
	body, err := web.ReadBody(r)
	if err != nil {
		idemhttp.Reject(w, r, err)
		return
	}
	var n Notification
	if err := web.DecodeBytes(body, &n); err != nil {
		idemhttp.Reject(w, r, err)
		return
	}
	if err := n.Validate(); err != nil {
		idemhttp.Reject(w, r, err)
		return
	}
	res, err := h.idem.Guard().Do(r.Context(), idemhttp.Request(r, n.NotifyKey(), body), func(ctx context.Context, tx *gorm.DB) (idempotent.Response, error) {
		outcome, err := h.recharges.Notify(ctx, tx, n)
		return answer(ctx, outcome, err)
	})
	if errors.Is(err, idempotent.ErrKeyReused) {
		// The key (channel + trade_no) was stored with another body. For another recharge
		// than the trade's own it is a trade_conflict, kept as an anomaly (I1).
		conflict, cerr := h.recharges.TradeConflict(r.Context(), n)
		switch {
		case cerr != nil:
			res, err = idempotent.Result{}, cerr
		case conflict:
			err = anomaly.ErrTradeConflict
		}
	}
	idemhttp.Write(w, r, res, err)
}

// answer turns the outcome of Notify into the channel's answer: success (marked
// state_rejected when the recharge had moved on), a 400 amount_mismatch or a 422
// trade_conflict committed with its anomaly, or the error for the guard to store (4xx) or not (anything else).
func answer(ctx context.Context, outcome NotifyOutcome, err error) (idempotent.Response, error) {
	switch {
	case err == nil:
		resp := idemhttp.JSON(http.StatusOK, map[string]string{"result": "success"})
		if outcome.StateRejected() {
			resp.Header[idemhttp.HeaderOutcome] = string(idempotent.StateRejected)
		}
		return resp, nil
	case errors.Is(err, ErrAmountMismatch), errors.Is(err, anomaly.ErrTradeConflict):
		resp, _ := idemhttp.StoredProblemAt("/v1/recharges/notify")(ctx, err)
		return resp, nil
	}
	return idempotent.Response{}, err
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
