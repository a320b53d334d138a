package explain

import (
	"net/http"
	"net/url"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// handles are the query parameters that name a handle, each with the one that may go with it.
var handles = map[string]string{"key": "user_id", "order": "", "trade": "channel", "refund": ""}

// companions are the parameters that go with a handle, and the handle each goes with.
var companions = map[string]string{"user_id": "key", "channel": "trade"}

// maxNumber is the longest channel number or out_refund_no the schema holds, in bytes.
const maxNumber = 128

// ParseHandle reads the handle of an explanation from the query: exactly one of key (with
// user_id), order, trade (with an optional channel) or refund; no parameter twice, nothing else.
func ParseHandle(q url.Values) (Handle, error) {
	var h Handle
	for name, values := range q {
		_, isHandle := handles[name]
		if _, isCompanion := companions[name]; !isHandle && !isCompanion {
			return h, apperr.ErrInvalidRequest.Withf("unknown query parameter %q: explain one of key (with user_id), order, trade (with channel) or refund", name)
		}
		if len(values) != 1 {
			return h, apperr.ErrInvalidRequest.Withf("query parameter %q is given %d times", name, len(values))
		}
		if isHandle {
			if h.Kind != "" {
				return h, apperr.ErrInvalidRequest.Withf("%s and %s are two handles: explain one at a time", h.Kind, name)
			}
			h.Kind, h.Value = name, values[0]
		}
	}
	if h.Kind == "" {
		return h, apperr.ErrInvalidRequest.Withf("name what to explain: one of key (with user_id), order, trade or refund")
	}
	for name, with := range companions {
		if q.Has(name) && with != h.Kind {
			return h, apperr.ErrInvalidRequest.Withf("%s goes with %s only", name, with)
		}
	}
	h.UserID, h.Channel = q.Get("user_id"), q.Get("channel")
	switch h.Kind {
	case "key":
		if _, ok := ids.Parse(h.UserID); !ok {
			return h, apperr.ErrInvalidRequest.Withf("key needs user_id, the key's user: a positive decimal number without sign or leading zeros")
		}
		if !idempotent.ValidKey(h.Value) {
			return h, apperr.ErrInvalidRequest.Withf("key must be an Idempotency-Key: 1..255 visible ASCII characters")
		}
	case "order":
		if _, ok := ids.Parse(h.Value); !ok {
			return h, apperr.ErrInvalidRequest.Withf("order must be an order id, a positive decimal number without sign or leading zeros")
		}
	case "trade", "refund":
		if h.Value == "" || len(h.Value) > maxNumber {
			return h, apperr.ErrInvalidRequest.Withf("%s must be 1..%d bytes", h.Kind, maxNumber)
		}
		if q.Has("channel") {
			if err := web.CheckChannel("channel", h.Channel); err != nil {
				return h, err
			}
		}
	}
	return h, nil
}

// Handler serves GET /v1/admin/explain: the explanation of the handle the query names, as JSON.
func (e *Explainer) Handler(w http.ResponseWriter, r *http.Request) {
	h, err := ParseHandle(r.URL.Query())
	var x *Explanation
	if err == nil {
		x, err = e.Explain(r.Context(), h)
	}
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	web.WriteJSON(w, http.StatusOK, x)
}
