package inventory

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// View is the JSON form of an Item.
type View struct {
	SKU       string `json:"sku"`
	Name      string `json:"name"`
	Price     int64  `json:"price"`
	Available int64  `json:"available"`
	Reserved  int64  `json:"reserved"`
	Sold      int64  `json:"sold"`
}

func viewOf(it Item) View {
	return View{SKU: it.SKU, Name: it.Name, Price: it.Price, Available: it.Available, Reserved: it.Reserved, Sold: it.Sold}
}

// MaxAmount is the largest price or stock figure the API accepts (10^10).
const MaxAmount = 10_000_000_000

// Handler serves the inventory routes.
type Handler struct{ store *Store }

// NewHandler returns the inventory HTTP handler.
func NewHandler(store *Store) *Handler { return &Handler{store: store} }

// Routes serves GET /{sku}, mounted at /v1/inventory. Reading stock is naturally idempotent.
// The answer's ETag is the SKU's version, for a later conditional PUT (If-Match).
func (h *Handler) Routes() chi.Router {
	r := chi.NewRouter()
	r.Get("/{sku}", h.get)
	return r
}

// AdminRoutes serves PUT /{sku}, mounted at /v1/admin/inventory. Absolute values make it
// naturally idempotent; with If-Match it is also optimistic: it changes the SKU only while
// its version is the one the client read (412 precondition_failed otherwise).
func (h *Handler) AdminRoutes() chi.Router {
	r := chi.NewRouter()
	r.Put("/{sku}", h.put)
	return r
}

// skuParam returns the {sku} path parameter, percent-decoded the same way on every route
// ("ENC%2D1" is "ENC-1"), or invalid_request when it is not a valid SKU.
func skuParam(r *http.Request) (string, error) {
	sku, err := web.PathParam(r, "sku")
	if err != nil {
		return "", err
	}
	return sku, CheckSKU("sku", sku)
}

// etag is the entity tag of it's current state: its version, quoted.
func etag(it Item) string { return `"` + strconv.FormatInt(it.Version, 10) + `"` }

func (h *Handler) get(w http.ResponseWriter, r *http.Request) {
	sku, err := skuParam(r)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	it, err := h.store.Get(r.Context(), sku)
	if err != nil {
		if errors.Is(err, ErrUnknownSKU) {
			err = apperr.ErrNotFound.Withf("no such SKU %q", sku)
		}
		web.WriteError(w, r, err)
		return
	}
	w.Header().Set("ETag", etag(it))
	web.WriteJSON(w, http.StatusOK, viewOf(it))
}

type putRequest struct {
	Price     *int64 `json:"price"`
	Available *int64 `json:"available"`
}

// put is PUT /v1/admin/inventory/{sku} {"price","available"}: the SKU's absolute price and
// available stock. Without If-Match it is an upsert; with If-Match it updates an existing SKU
// only at one of the listed versions.
func (h *Handler) put(w http.ResponseWriter, r *http.Request) {
	sku, err := skuParam(r)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	var req putRequest
	if err := web.Decode(r, &req); err != nil {
		web.WriteError(w, r, err)
		return
	}
	switch {
	case req.Price == nil || *req.Price < 1 || *req.Price > MaxAmount:
		web.WriteError(w, r, apperr.ErrInvalidRequest.Withf("price is required, in cents, 1..10^10"))
		return
	case req.Available == nil || *req.Available < 0 || *req.Available > MaxAmount:
		web.WriteError(w, r, apperr.ErrInvalidRequest.Withf("available is required, 0..10^10"))
		return
	}
	versions, conditional, err := ifMatch(r.Header.Values("If-Match"))
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	var it Item
	if conditional {
		it, err = h.store.PutIfVersion(r.Context(), sku, *req.Price, *req.Available, versions)
	} else {
		it, err = h.store.Put(r.Context(), sku, *req.Price, *req.Available)
	}
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	w.Header().Set("ETag", etag(it))
	web.WriteJSON(w, http.StatusOK, viewOf(it))
}

// errIfMatch is an If-Match header that is not a list of entity tags.
var errIfMatch = apperr.ErrInvalidRequest.Withf(`If-Match must be "*" or entity tags such as "3", from the ETag of GET /v1/inventory/{sku}`)

// ifMatch parses the If-Match header fields (RFC 9110 §13.1.1): whether there is a
// condition, and the versions it accepts — none for "*", which accepts any version of an
// existing SKU. If-Match compares strongly, so a weak tag (W/"3") matches nothing, and so
// does a tag that is not one of our versions; when no tag can match, the versions hold -1,
// which no row has. A field that is not a list of entity tags is invalid_request.
func ifMatch(fields []string) (versions []int64, conditional bool, err error) {
	if len(fields) == 0 {
		return nil, false, nil
	}
	star, tags := false, 0
	for _, f := range fields {
		for tag := range strings.SplitSeq(f, ",") {
			tag = strings.TrimSpace(tag)
			if tag != "" {
				tags++
			}
			switch {
			case tag == "":
				continue
			case tag == "*":
				star = true
			case strings.HasPrefix(tag, `W/"`) && len(tag) >= 4 && strings.HasSuffix(tag, `"`):
				// Weak: never matches under the strong comparison If-Match uses.
			case len(tag) >= 2 && tag[0] == '"' && tag[len(tag)-1] == '"':
				if v, err := strconv.ParseInt(tag[1:len(tag)-1], 10, 64); err == nil && v >= 0 {
					versions = append(versions, v)
				}
			default:
				return nil, false, errIfMatch
			}
		}
	}
	switch {
	case tags == 0:
		return nil, false, errIfMatch
	case star:
		return nil, true, nil
	case len(versions) == 0:
		return []int64{-1}, true, nil
	default:
		return versions, true, nil
	}
}
