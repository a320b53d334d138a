package ledger

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// ErrNotFound is a transfer no fact has written.
var ErrNotFound = apperr.ErrNotFound.Withf("no such transfer")

// Balance is an account's balance: what its postings add up to.
type Balance struct {
	Account string `json:"account"`
	// Posted is the sum of its postings that took effect.
	Posted int64 `json:"posted"`
	// Pending is the sum of its postings that refunds under way have set aside: posted if
	// the channel carries them out, gone if not.
	Pending int64 `json:"pending"`
}

// BalanceOf is account's balance on db. An account no transfer has touched has 0 and 0.
func BalanceOf(ctx context.Context, db *gorm.DB, account string) (Balance, error) {
	b := Balance{Account: account}
	err := db.WithContext(ctx).Raw(`SELECT
	    COALESCE(SUM(CASE WHEN p.pending = FALSE THEN p.amount ELSE 0 END), 0),
	    COALESCE(SUM(CASE WHEN p.pending = TRUE AND NOT EXISTS (SELECT 1 FROM ledger_transfers e WHERE e.pending_id = p.transfer_id)
	                      THEN p.amount ELSE 0 END), 0)
	  FROM ledger_postings p WHERE p.account = ?`, account).Row().Scan(&b.Posted, &b.Pending)
	return b, err
}

// TransferView is a transfer as the admin API shows it: with its postings and, for a pending
// refund, the transfer that ended it.
type TransferView struct {
	ID        string        `json:"id"`
	Kind      string        `json:"kind"`
	Channel   string        `json:"channel"`
	Number    string        `json:"number"`
	Amount    int64         `json:"amount"`
	PendingID *string       `json:"pending_id"`
	CaptureID *string       `json:"capture_id"`
	EndedBy   *string       `json:"ended_by"`
	CreatedAt time.Time     `json:"created_at"`
	Postings  []PostingView `json:"postings"`
}

// PostingView is a posting as the admin API shows it.
type PostingView struct {
	ID         string    `json:"id"`
	TransferID string    `json:"transfer_id"`
	Account    string    `json:"account"`
	Amount     int64     `json:"amount"`
	Pending    bool      `json:"pending"`
	CreatedAt  time.Time `json:"created_at"`
}

func viewOfPosting(p Posting) PostingView {
	return PostingView{ID: strconv.FormatInt(p.ID, 10), TransferID: p.TransferID, Account: p.Account, Amount: p.Amount, Pending: p.Pending, CreatedAt: p.CreatedAt.UTC()}
}

// Find returns transfer id with its postings and its end, or ErrNotFound.
func Find(ctx context.Context, db *gorm.DB, id string) (TransferView, error) {
	db = db.WithContext(ctx)
	var t Transfer
	if err := db.Where("id = ?", id).Take(&t).Error; errors.Is(err, gorm.ErrRecordNotFound) {
		return TransferView{}, ErrNotFound.Withf("no transfer %q", id)
	} else if err != nil {
		return TransferView{}, err
	}
	var ps []Posting
	if err := db.Where("transfer_id = ?", id).Order("amount").Find(&ps).Error; err != nil {
		return TransferView{}, err
	}
	var postings []PostingView
	for _, p := range ps {
		postings = append(postings, viewOfPosting(p))
	}
	var endedBy *string
	if t.Kind == Pending {
		var ends []string
		if err := db.Model(&Transfer{}).Where("pending_id = ?", id).Pluck("id", &ends).Error; err != nil {
			return TransferView{}, err
		}
		if len(ends) == 1 {
			endedBy = &ends[0]
		}
	}
	return viewOf(t, postings, endedBy), nil
}

// viewOf is the view of transfer t with its postings and, for a pending transfer, the one
// that ended it (nil while it is open).
func viewOf(t Transfer, postings []PostingView, endedBy *string) TransferView {
	v := TransferView{ID: t.ID, Kind: t.Kind, Channel: t.Channel, Number: t.Number, Amount: t.Amount,
		PendingID: t.PendingID, CaptureID: t.CaptureID, CreatedAt: t.CreatedAt.UTC(), Postings: postings}
	if v.Postings == nil {
		v.Postings = []PostingView{}
	}
	if t.Kind == Pending {
		v.EndedBy = endedBy
	}
	return v
}

// FindAll returns the transfers of ids that exist, each with its postings and, for a pending
// refund whose end is among ids, the transfer that ended it, in the order of their creation:
// two queries whatever the number of ids, for a reader that collects the books of one
// business fact.
func FindAll(ctx context.Context, db *gorm.DB, ids []string) ([]TransferView, error) {
	if len(ids) == 0 {
		return []TransferView{}, nil
	}
	db = db.WithContext(ctx)
	var ts []Transfer
	if err := db.Where("id IN ?", ids).Order("created_at, id").Find(&ts).Error; err != nil {
		return nil, err
	}
	found := make([]string, len(ts))
	for i, t := range ts {
		found[i] = t.ID
	}
	var ps []Posting
	if len(found) > 0 {
		if err := db.Where("transfer_id IN ?", found).Order("transfer_id, amount").Find(&ps).Error; err != nil {
			return nil, err
		}
	}
	postings := map[string][]PostingView{}
	for _, p := range ps {
		postings[p.TransferID] = append(postings[p.TransferID], viewOfPosting(p))
	}
	endedBy := map[string]*string{}
	for _, t := range ts {
		if t.PendingID != nil {
			endedBy[*t.PendingID] = &t.ID
		}
	}
	views := make([]TransferView, len(ts))
	for i, t := range ts {
		views[i] = viewOf(t, postings[t.ID], endedBy[t.ID])
	}
	return views, nil
}

// Routes are the admin API's read side of the books (docs/contract.md), mounted under
// /v1/admin/ledger: an account's balance and its postings, one transfer, and the check.
func Routes(db *gorm.DB) http.Handler {
	r := chi.NewRouter()
	r.Get("/accounts/{account}", func(w http.ResponseWriter, req *http.Request) {
		account, err := accountParam(req)
		if err == nil {
			err = onlyParams(req.URL.Query())
		}
		if err != nil {
			web.WriteError(w, req, err)
			return
		}
		b, err := BalanceOf(req.Context(), db, account)
		if err != nil {
			web.WriteError(w, req, err)
			return
		}
		web.WriteJSON(w, http.StatusOK, b)
	})
	r.Get("/accounts/{account}/postings", func(w http.ResponseWriter, req *http.Request) {
		account, err := accountParam(req)
		var limit int
		var before int64
		if err == nil {
			limit, before, err = web.PageParams(req.URL.Query(), "p")
		}
		if err != nil {
			web.WriteError(w, req, err)
			return
		}
		q := db.WithContext(req.Context()).Where("account = ?", account).Order("id DESC").Limit(limit + 1)
		if before > 0 {
			q = q.Where("id < ?", before)
		}
		var ps []Posting
		if err := q.Find(&ps).Error; err != nil {
			web.WriteError(w, req, err)
			return
		}
		var next *string
		if len(ps) > limit {
			ps = ps[:limit]
			c := web.PageCursor("p", ps[limit-1].ID)
			next = &c
		}
		views := make([]PostingView, len(ps))
		for i, p := range ps {
			views[i] = viewOfPosting(p)
		}
		web.WriteJSON(w, http.StatusOK, map[string]any{"postings": views, "next_cursor": next})
	})
	r.Get("/transfers/{id}", func(w http.ResponseWriter, req *http.Request) {
		id, err := web.PathParam(req, "id")
		if err == nil {
			err = onlyParams(req.URL.Query())
		}
		if err != nil {
			web.WriteError(w, req, err)
			return
		}
		v, err := Find(req.Context(), db, id)
		if err != nil {
			web.WriteError(w, req, err)
			return
		}
		web.WriteJSON(w, http.StatusOK, v)
	})
	r.Get("/check", func(w http.ResponseWriter, req *http.Request) {
		if err := onlyParams(req.URL.Query()); err != nil {
			web.WriteError(w, req, err)
			return
		}
		vs, err := Check(req.Context(), db)
		if err != nil {
			web.WriteError(w, req, err)
			return
		}
		if vs == nil {
			vs = []Violation{}
		}
		web.WriteJSON(w, http.StatusOK, map[string]any{"violations": vs})
	})
	return r
}

// accountParam is the account of the route: a house account or one of the forms
// channel:<name> and customer:<id>.
func accountParam(req *http.Request) (string, error) {
	account, err := web.PathParam(req, "account")
	if err != nil {
		return "", err
	}
	kind, rest, _ := strings.Cut(account, ":")
	switch {
	case account == Revenue, account == Suspense:
		return account, nil
	case kind == "channel" && web.ValidChannel(rest):
		return account, nil
	case kind == "customer":
		if id, err := strconv.ParseInt(rest, 10, 64); err == nil && id > 0 && CustomerAccount(id) == account {
			return account, nil
		}
	}
	return "", apperr.ErrInvalidRequest.Withf("account %q is none of %s, %s, channel:<name>, customer:<user id>", account, Revenue, Suspense)
}

// onlyParams refuses any query parameter: a typo must not pass for a filter.
func onlyParams(q url.Values) error {
	for name := range q {
		return apperr.ErrInvalidRequest.Withf("unknown query parameter %q", name)
	}
	return nil
}
