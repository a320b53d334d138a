package inventory

import (
	"errors"
	"net/http"

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
func (h *Handler) Routes() chi.Router {
	r := chi.NewRouter()
	r.Get("/{sku}", h.get)
	return r
}

// AdminRoutes serves PUT /{sku}, mounted at /v1/admin/inventory. Absolute values make it
// naturally idempotent.
func (h *Handler) AdminRoutes() chi.Router {
	r := chi.NewRouter()
	r.Put("/{sku}", h.put)
	return r
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request) {
	it, err := h.store.Get(r.Context(), chi.URLParam(r, "sku"))
	if err != nil {
		if errors.Is(err, ErrUnknownSKU) {
			err = apperr.ErrNotFound.Withf("no such SKU %q", chi.URLParam(r, "sku"))
		}
		web.WriteError(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, viewOf(it))
}

type putRequest struct {
	Price     *int64 `json:"price"`
	Available *int64 `json:"available"`
}

func (h *Handler) put(w http.ResponseWriter, r *http.Request) {
	var req putRequest
	if err := web.Decode(r, &req); err != nil {
		web.WriteError(w, r, err)
		return
	}
	sku := chi.URLParam(r, "sku")
	switch {
	case len(sku) == 0 || len(sku) > 64:
		web.WriteError(w, r, apperr.ErrInvalidRequest.Withf("sku must be 1..64 characters"))
		return
	case req.Price == nil || *req.Price < 0 || *req.Price > MaxAmount:
		web.WriteError(w, r, apperr.ErrInvalidRequest.Withf("price is required, in cents, 0..10^10"))
		return
	case req.Available == nil || *req.Available < 0 || *req.Available > MaxAmount:
		web.WriteError(w, r, apperr.ErrInvalidRequest.Withf("available is required, 0..10^10"))
		return
	}
	it, err := h.store.Put(r.Context(), sku, *req.Price, *req.Available)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, viewOf(it))
}
