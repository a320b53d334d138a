package webhook

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"time"

	"github.com/go-chi/chi/v5"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/httpkey"
	idem "github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/clock"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// MaxRedeliver is the most events one redelivery of a time range queues.
const MaxRedeliver = 10_000

// MaxGrace is the longest grace a rotation may give the old secret.
const MaxGrace = 7 * 24 * time.Hour

// Handler serves the admin routes of webhook endpoints (docs/contract.md).
type Handler struct {
	db        *gorm.DB
	ids       *ids.Generator
	endpoints *Endpoints
	idem      httpkey.Handler
	policy    AddressPolicy
	grace     time.Duration
}

// NewHandler returns the handler; idem runs its guarded writes under the admin's keys
// (idem.AdminHTTP) and grace is a rotation's default grace (ONCEPAY_WEBHOOK_ROTATION_GRACE).
func NewHandler(db *gorm.DB, gen *ids.Generator, endpoints *Endpoints, idem httpkey.Handler, policy AddressPolicy, grace time.Duration) *Handler {
	return &Handler{db: db, ids: gen, endpoints: endpoints, idem: idem, policy: policy, grace: grace}
}

// Routes serves /v1/admin/webhook-endpoints behind the admin key. Registering is not
// idempotent by key (each call is a new endpoint with its own secret); a patch sets absolute
// values (naturally idempotent); rotating a secret and redelivering need an Idempotency-Key,
// so that a retried call rotates once and queues once: they are marked so (idem.KeyRequired).
func (h *Handler) Routes() chi.Router {
	r := chi.NewRouter()
	r.Post("/", h.create)
	r.Get("/", h.list)
	r.Get("/{endpoint_id}", h.get)
	r.Patch("/{endpoint_id}", h.patch)
	r.Method(http.MethodPost, "/{endpoint_id}/rotate-secret", idem.KeyRequired(h.idem, h.rotate))
	r.Get("/{endpoint_id}/deliveries", h.deliveries)
	r.Method(http.MethodPost, "/{endpoint_id}/redeliver", idem.KeyRequired(h.idem, h.redeliver))
	return r
}

type createRequest struct {
	URL         string   `json:"url"`
	EventTypes  []string `json:"event_types"`
	Description string   `json:"description"`
}

// create is POST /v1/admin/webhook-endpoints: 201 with the secret, the only answer that shows
// it.
func (h *Handler) create(w http.ResponseWriter, r *http.Request) {
	var req createRequest
	if err := web.Decode(r, &req); err != nil {
		web.WriteError(w, r, err)
		return
	}
	if err := h.check(r.Context(), req.URL, req.EventTypes, req.Description); err != nil {
		web.WriteError(w, r, err)
		return
	}
	e, err := h.endpoints.Create(r.Context(), req.URL, req.Description, req.EventTypes)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	v := ViewOf(e)
	v.Secret = e.Secret
	w.Header().Set("Location", "/v1/admin/webhook-endpoints/"+v.EndpointID)
	web.WriteJSON(w, http.StatusCreated, v)
}

// check validates a registration: its URL, its types and its description.
func (h *Handler) check(ctx context.Context, rawURL string, types []string, description string) error {
	if err := h.policy.CheckURL(ctx, rawURL); err != nil {
		return err
	}
	if err := CheckTypes("event_types", types); err != nil {
		return err
	}
	if len(description) > 255 {
		return apperr.ErrInvalidRequest.Withf("description must be at most 255 bytes")
	}
	return nil
}

func (h *Handler) list(w http.ResponseWriter, r *http.Request) {
	list, err := h.endpoints.List(r.Context())
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	views := make([]EndpointView, len(list))
	for i, e := range list {
		views[i] = ViewOf(e)
	}
	web.WriteJSON(w, http.StatusOK, map[string]any{"endpoints": views})
}

// endpointID reads the path's endpoint id; a malformed one is an unknown endpoint.
func endpointID(r *http.Request) (int64, error) {
	id, ok := ids.Parse(chi.URLParam(r, "endpoint_id"))
	if !ok {
		return 0, ErrNotFound
	}
	return id, nil
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request) {
	id, err := endpointID(r)
	if err == nil {
		var e Endpoint
		if e, err = h.endpoints.Get(r.Context(), h.db, id); err == nil {
			web.WriteJSON(w, http.StatusOK, ViewOf(e))
			return
		}
	}
	web.WriteError(w, r, err)
}

type patchRequest struct {
	Status     *Status  `json:"status"`
	EventTypes []string `json:"event_types"`
	URL        *string  `json:"url"`
}

// patch is PATCH /v1/admin/webhook-endpoints/{endpoint_id}: absolute values, so a repeat
// changes nothing more.
func (h *Handler) patch(w http.ResponseWriter, r *http.Request) {
	id, err := endpointID(r)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	var req patchRequest
	if err := web.Decode(r, &req); err != nil {
		web.WriteError(w, r, err)
		return
	}
	if err := h.checkPatch(r.Context(), req); err != nil {
		web.WriteError(w, r, err)
		return
	}
	if _, err := h.endpoints.Get(r.Context(), h.db, id); err != nil {
		web.WriteError(w, r, err)
		return
	}
	e, err := h.endpoints.Update(r.Context(), id, Patch(req))
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, ViewOf(e))
}

func (h *Handler) checkPatch(ctx context.Context, req patchRequest) error {
	if req.Status == nil && req.EventTypes == nil && req.URL == nil {
		return apperr.ErrInvalidRequest.Withf("give at least one of status, event_types and url")
	}
	if req.Status != nil && *req.Status != Enabled && *req.Status != Disabled {
		return apperr.ErrInvalidRequest.Withf("status must be enabled or disabled, got %q", *req.Status)
	}
	if req.URL != nil {
		if err := h.policy.CheckURL(ctx, *req.URL); err != nil {
			return err
		}
	}
	if req.EventTypes != nil {
		return CheckTypes("event_types", req.EventTypes)
	}
	return nil
}

type rotateRequest struct {
	// Grace is how long the old secret keeps signing beside the new one (Go duration).
	Grace *string `json:"grace"`
}

// rotate is POST /v1/admin/webhook-endpoints/{endpoint_id}/rotate-secret, through the guard:
// a retry with the same key answers the same new secret and rotates once. The secret itself is
// never stored with the answer (the dedup record and the replay cache hold no credential,
// docs/security.md): the stored answer names it by its SHA-256, and every answer — the first
// and a replay — shows the endpoint's secret only while it still is that one. A replay after a
// later rotation is 409 illegal_state: the secret it made no longer signs.
func (h *Handler) rotate(w http.ResponseWriter, r *http.Request, key idempotent.Key) {
	body, err := web.ReadBody(r)
	if err != nil {
		h.idem.Reject(w, r, err)
		return
	}
	id, err := endpointID(r)
	if err != nil {
		h.idem.Reject(w, r, err)
		return
	}
	grace, err := h.decodeRotate(body)
	if err != nil {
		h.idem.Reject(w, r, err)
		return
	}
	res, err := h.idem.Guard.Do(r.Context(), h.idem.Request(r, key, body), func(ctx context.Context, tx *gorm.DB, record func(idempotent.Response) error) error {
		secret, err := h.endpoints.Rotate(ctx, tx, id, grace)
		if err != nil {
			return err
		}
		return record(idem.JSON(http.StatusOK, rotated{
			SecretSHA256: fingerprint(secret), PreviousExpiresAt: clock.Now().Add(grace).Format(time.RFC3339),
		}))
	})
	if err == nil && res.Response.Status == http.StatusOK {
		res.Response.Body, err = h.reveal(r.Context(), id, res.Response.Body)
	}
	h.idem.Write(w, r, res, err)
}

// rotated is the stored answer of a rotation: the new secret by its fingerprint only.
type rotated struct {
	SecretSHA256      string `json:"secret_sha256"`
	PreviousExpiresAt string `json:"previous_secret_expires_at"`
}

// ErrRotationSuperseded answers a replayed rotation whose secret was rotated again since.
var ErrRotationSuperseded = apperr.New(http.StatusConflict, "illegal_state",
	"the secret this rotation made was rotated again since and no longer signs; rotate with a new Idempotency-Key")

// reveal turns the stored answer of a rotation into the client's: the endpoint's secret, if
// it still is the one the rotation made.
func (h *Handler) reveal(ctx context.Context, id int64, stored []byte) ([]byte, error) {
	var rot rotated
	if err := json.Unmarshal(stored, &rot); err != nil {
		return nil, err
	}
	e, err := h.endpoints.Get(ctx, h.db, id)
	if err != nil {
		return nil, err
	}
	if fingerprint(e.Secret) != rot.SecretSHA256 {
		return nil, ErrRotationSuperseded
	}
	out, err := json.Marshal(map[string]string{"secret": e.Secret, "previous_secret_expires_at": rot.PreviousExpiresAt})
	return append(out, '\n'), err
}

// fingerprint is the hex SHA-256 of a secret.
func fingerprint(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

func (h *Handler) decodeRotate(body []byte) (time.Duration, error) {
	var req rotateRequest
	if len(body) > 0 {
		if err := web.DecodeBytes(body, &req); err != nil {
			return 0, err
		}
	}
	if req.Grace == nil {
		return h.grace, nil
	}
	d, err := time.ParseDuration(*req.Grace)
	if err != nil || d < 0 || d > MaxGrace {
		return 0, apperr.ErrInvalidRequest.Withf("grace must be a duration in 0s..168h, got %q", *req.Grace)
	}
	return d, nil
}

// AttemptView is one entry of the delivery log (docs/contract.md).
type AttemptView struct {
	EventID         string  `json:"event_id"`
	EventType       string  `json:"event_type,omitempty"`
	Attempt         int     `json:"attempt"`
	SentAt          string  `json:"sent_at"`
	StatusCode      int     `json:"status_code"`
	LatencyMS       int64   `json:"latency_ms"`
	Error           *string `json:"error"`
	ResponseSnippet *string `json:"response_snippet"`
}

// deliveries is GET /v1/admin/webhook-endpoints/{endpoint_id}/deliveries?event_id=&cursor=&limit=:
// every attempt sent to the endpoint, newest first, paged by next_cursor (null on the last
// page).
func (h *Handler) deliveries(w http.ResponseWriter, r *http.Request) {
	id, err := endpointID(r)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	eventID, before, limit, err := logParams(r.URL.Query())
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	if _, err := h.endpoints.Get(r.Context(), h.db, id); err != nil {
		web.WriteError(w, r, err)
		return
	}
	q := h.db.WithContext(r.Context()).Table("webhook_attempts a").
		Select("a.*, events.type AS event_type").Joins("LEFT JOIN events ON events.id = a.event_id").
		Where("a.endpoint_id = ?", id)
	if eventID > 0 {
		q = q.Where("a.event_id = ?", eventID)
	}
	if before > 0 {
		q = q.Where("a.id < ?", before)
	}
	var rows []struct {
		Attempt
		EventType *string
	}
	if err := q.Order("a.id DESC").Limit(limit + 1).Scan(&rows).Error; err != nil {
		web.WriteError(w, r, err)
		return
	}
	var next *string
	if len(rows) > limit {
		rows = rows[:limit]
		c := encodeCursorOf("d", rows[limit-1].ID)
		next = &c
	}
	views := make([]AttemptView, len(rows))
	for i, a := range rows {
		views[i] = AttemptView{EventID: ids.Format(a.EventID), Attempt: a.Attempt.Attempt, SentAt: a.SentAt.UTC().Format(time.RFC3339Nano),
			StatusCode: a.StatusCode, LatencyMS: a.LatencyMS, Error: a.Error, ResponseSnippet: a.ResponseSnippet}
		if a.EventType != nil {
			views[i].EventType = *a.EventType
		}
	}
	web.WriteJSON(w, http.StatusOK, map[string]any{"deliveries": views, "next_cursor": next})
}

func logParams(q url.Values) (eventID, before int64, limit int, err error) {
	limit = 100
	for name, values := range q {
		if len(values) != 1 {
			return 0, 0, 0, apperr.ErrInvalidRequest.Withf("query parameter %q is given %d times; give it once", name, len(values))
		}
		v := values[0]
		switch name {
		case "event_id":
			var ok bool
			if eventID, ok = ids.Parse(v); !ok {
				return 0, 0, 0, apperr.ErrInvalidRequest.Withf("event_id must be an event's id, got %q", v)
			}
		case "cursor":
			if before, err = decodeCursor("d", v); err != nil {
				return 0, 0, 0, err
			}
		case "limit":
			if limit, err = parseLimit(v); err != nil {
				return 0, 0, 0, err
			}
		default:
			return 0, 0, 0, apperr.ErrInvalidRequest.Withf("unknown query parameter %q: use event_id, cursor and limit", name)
		}
	}
	return eventID, before, limit, nil
}

type redeliverRequest struct {
	EventID *string `json:"event_id"`
	From    *string `json:"from"`
	To      *string `json:"to"`
}

// ErrEventNotFound is a redelivery of an event that does not exist (or is past retention).
var ErrEventNotFound = apperr.ErrNotFound.Withf("no such event (or it is past ONCEPAY_EVENT_RETENTION)")

// redeliver is POST /v1/admin/webhook-endpoints/{endpoint_id}/redeliver, through the guard:
// one event by id, or the endpoint's subscribed events created in [from, to), queued again as
// the same events — same id, same body — with a fresh schedule. A retry with the same key
// answers the first count and queues nothing more.
func (h *Handler) redeliver(w http.ResponseWriter, r *http.Request, key idempotent.Key) {
	body, err := web.ReadBody(r)
	if err != nil {
		h.idem.Reject(w, r, err)
		return
	}
	id, err := endpointID(r)
	if err != nil {
		h.idem.Reject(w, r, err)
		return
	}
	sel, err := decodeRedeliver(body)
	if err != nil {
		h.idem.Reject(w, r, err)
		return
	}
	_, _ = h.idem.Do(w, r, key, body, func(ctx context.Context, tx *gorm.DB, record func(idempotent.Response) error) error {
		n, err := h.Redeliver(ctx, tx, id, sel)
		if err != nil {
			return err
		}
		return record(idem.JSON(http.StatusAccepted, map[string]any{"queued": n}))
	})
}

// Selection names the events of a redelivery: one by id, or a time range of creation.
type Selection struct {
	EventID  int64
	From, To time.Time
}

func decodeRedeliver(body []byte) (Selection, error) {
	var req redeliverRequest
	if err := web.DecodeBytes(body, &req); err != nil {
		return Selection{}, err
	}
	switch {
	case req.EventID != nil && req.From == nil && req.To == nil:
		id, ok := ids.Parse(*req.EventID)
		if !ok {
			return Selection{}, apperr.ErrInvalidRequest.Withf("event_id must be an event's id, got %q", *req.EventID)
		}
		return Selection{EventID: id}, nil
	case req.EventID == nil && req.From != nil && req.To != nil:
		from, err1 := time.Parse(time.RFC3339Nano, *req.From)
		to, err2 := time.Parse(time.RFC3339Nano, *req.To)
		if err1 != nil || err2 != nil || !from.Before(to) {
			return Selection{}, apperr.ErrInvalidRequest.Withf("from and to must be RFC 3339 times, from before to")
		}
		return Selection{From: from.UTC(), To: to.UTC()}, nil
	}
	return Selection{}, apperr.ErrInvalidRequest.Withf(`give {"event_id"} or {"from","to"}, not both`)
}

// Redeliver queues sel's events to endpoint id again in tx: each delivery is made pending
// and due now with a fresh schedule (created when the endpoint never had one). A delivery
// being sent right now keeps its lease; the attempt in flight is logged, and the redelivery
// follows it. It returns how many deliveries it queued.
func (h *Handler) Redeliver(ctx context.Context, tx *gorm.DB, id int64, sel Selection) (int, error) {
	e, err := h.endpoints.Get(ctx, tx, id)
	if err != nil {
		return 0, err
	}
	var events []int64
	q := tx.WithContext(ctx).Model(&outbox.Event{})
	if sel.EventID > 0 {
		q = q.Where("id = ?", sel.EventID)
	} else {
		q = q.Where("created_at >= ? AND created_at < ? AND type IN ? AND seq IS NOT NULL", sel.From, sel.To, e.Types()).Order("seq")
	}
	if err := q.Limit(MaxRedeliver+1).Pluck("id", &events).Error; err != nil {
		return 0, err
	}
	switch {
	case sel.EventID > 0 && len(events) == 0:
		return 0, ErrEventNotFound
	case len(events) > MaxRedeliver:
		return 0, apperr.ErrInvalidRequest.Withf("the range holds more than %d events: redeliver it in smaller ranges", MaxRedeliver)
	case len(events) == 0:
		return 0, nil
	}
	// Due now by the database's clock, which Sender.Claim compares with.
	now, err := database.Now(ctx, tx)
	if err != nil {
		return 0, err
	}
	rows := make([]Delivery, len(events))
	for i, ev := range events {
		rows[i] = Delivery{ID: h.ids.Next(), EndpointID: id, EventID: ev, Status: Pending, NextAttemptAt: now, CreatedAt: now, UpdatedAt: now}
	}
	err = tx.WithContext(ctx).Clauses(clause.OnConflict{
		Columns:   []clause.Column{{Name: "endpoint_id"}, {Name: "event_id"}},
		DoUpdates: clause.Assignments(map[string]any{"status": Pending, "round_attempts": 0, "next_attempt_at": now, "updated_at": now}),
	}).CreateInBatches(&rows, 200).Error
	return len(events), err
}
