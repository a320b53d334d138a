// Package webhook is the merchant's side of the chain (docs/contract.md, webhooks and events):
// the endpoints a merchant registers, the sequencer that places each committed event in the
// feed and fans it out to the endpoints subscribed to its type, the sender that POSTs every
// delivery signed with a timestamp and retries it on a schedule under a lease in the database,
// the delivery log with manual redelivery, and the events API.
//
// The events themselves are written by internal/outbox in the transaction of each business
// change (I17): nothing here can announce a change that did not commit. Delivery is at least
// once — a receiver's lost 2xx is a retry — so every attempt carries the event's id for the
// receiver to deduplicate by, in the transaction of its own effect (I16;
// examples/webhook-receiver shows how).
package webhook

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/clock"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/keyring"
)

// Status is where an endpoint stands.
type Status string

// The endpoint statuses. A merchant moves an endpoint between enabled and disabled; the sender
// moves it to failing when a delivery used up the whole schedule, and back to enabled at its
// next 2xx. A failing endpoint still receives new events: nothing is dropped while a merchant
// mends a receiver.
const (
	Enabled  Status = "enabled"
	Disabled Status = "disabled"
	Failing  Status = "failing"
)

// Errors of the webhook routes.
var (
	// ErrNotFound is an unknown endpoint.
	ErrNotFound = apperr.ErrNotFound.Withf("no such webhook endpoint")
	// ErrInvalidURL is a URL the deployment refuses to send to.
	ErrInvalidURL = apperr.ErrInvalidRequest
	// ErrRotatedMeanwhile is a rotation that lost the race to another one with another key.
	ErrRotatedMeanwhile = apperr.New(http.StatusConflict, "illegal_state", "the secret was rotated by another request at the same moment; nothing changed here")
)

// Endpoint is a row of webhook_endpoints.
type Endpoint struct {
	ID          int64
	URL         string
	Description string
	// EventTypes is the JSON list of the types the endpoint is subscribed to.
	EventTypes string
	Status     Status
	// Secret signs every attempt; it is shown only in the answer that creates or rotates it.
	// It is never stored as such: the row holds SealedSecret (secrets.go), and the store
	// opens it when it reads the row.
	Secret string `gorm:"-"`
	// PreviousSecret signs beside Secret until PreviousExpiresAt, after a rotation, so that
	// a receiver can switch secrets without refusing a delivery.
	PreviousSecret *string `gorm:"-"`
	// SealedSecret and SealedPrevious are the secrets as stored: AES-256-GCM under the key
	// SecretKeyID of ONCEPAY_WEBHOOK_KEYS, bound to the row. A nil SecretKeyID is a row from
	// before sealing, in plain text until Endpoints.Reseal seals it.
	SealedSecret      string  `gorm:"column:secret"`
	SealedPrevious    *string `gorm:"column:previous_secret"`
	SecretKeyID       *string `gorm:"column:secret_key_id"`
	PreviousExpiresAt *time.Time
	CreatedAt         time.Time
	UpdatedAt         time.Time
}

// TableName is the table of Endpoint.
func (Endpoint) TableName() string { return "webhook_endpoints" }

// Types is the endpoint's list of subscribed event types.
func (e Endpoint) Types() []string {
	var types []string
	_ = json.Unmarshal([]byte(e.EventTypes), &types)
	return types
}

// Subscribed reports whether the endpoint is subscribed to typ.
func (e Endpoint) Subscribed(typ string) bool { return slices.Contains(e.Types(), typ) }

// Secrets are the secrets that sign an attempt sent at now: the current one, and the previous
// one while its grace lasts.
func (e Endpoint) Secrets(now time.Time) []string {
	out := []string{e.Secret}
	if e.PreviousSecret != nil && e.PreviousExpiresAt != nil && now.Before(*e.PreviousExpiresAt) {
		out = append(out, *e.PreviousSecret)
	}
	return out
}

// EndpointView is the JSON of an endpoint; Secret is set only by create.
type EndpointView struct {
	EndpointID  string   `json:"endpoint_id"`
	URL         string   `json:"url"`
	Description string   `json:"description"`
	EventTypes  []string `json:"event_types"`
	Status      Status   `json:"status"`
	Secret      string   `json:"secret,omitempty"`
	CreatedAt   string   `json:"created_at"`
	UpdatedAt   string   `json:"updated_at"`
}

// ViewOf renders e without its secret.
func ViewOf(e Endpoint) EndpointView {
	return EndpointView{
		EndpointID: ids.Format(e.ID), URL: e.URL, Description: e.Description, EventTypes: e.Types(),
		Status: e.Status, CreatedAt: e.CreatedAt.UTC().Format(time.RFC3339), UpdatedAt: e.UpdatedAt.UTC().Format(time.RFC3339),
	}
}

// CheckTypes returns the problem of a list of event types, or nil: 1..len(EventTypes) known
// types, each once.
func CheckTypes(field string, types []string) error {
	if len(types) == 0 {
		return apperr.ErrInvalidRequest.Withf("%s must list at least one of %s", field, strings.Join(outbox.EventTypes, ", "))
	}
	seen := map[string]bool{}
	for i, t := range types {
		switch {
		case !slices.Contains(outbox.EventTypes, t):
			return apperr.ErrInvalidRequest.Withf("%s[%d]: %q is not an event type; use %s", field, i, t, strings.Join(outbox.EventTypes, ", "))
		case seen[t]:
			return apperr.ErrInvalidRequest.Withf("%s[%d]: %q is listed twice", field, i, t)
		}
		seen[t] = true
	}
	return nil
}

// newSecret returns a fresh signing secret as Standard Webhooks serialises one: whsec_ and 32
// random bytes in standard base64 (the specification asks for 24 to 64).
func newSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return SecretPrefix + base64.StdEncoding.EncodeToString(b)
}

// Endpoints stores the merchant's endpoints, their secrets sealed under keys.
type Endpoints struct {
	db   *gorm.DB
	ids  *ids.Generator
	keys *keyring.Ring
}

// NewEndpoints returns the endpoint store on db, sealing secrets under keys
// (ONCEPAY_WEBHOOK_KEYS).
func NewEndpoints(db *gorm.DB, gen *ids.Generator, keys *keyring.Ring) *Endpoints {
	return &Endpoints{db: db, ids: gen, keys: keys}
}

// Create registers an endpoint, enabled, with a fresh secret; url and types must have passed
// AddressPolicy.CheckURL and CheckTypes.
func (s *Endpoints) Create(ctx context.Context, rawURL, description string, types []string) (Endpoint, error) {
	now := clock.Now().Truncate(time.Microsecond)
	list, _ := json.Marshal(types)
	e := Endpoint{ID: s.ids.Next(), URL: rawURL, Description: description, EventTypes: string(list), Status: Enabled,
		Secret: newSecret(), CreatedAt: now, UpdatedAt: now}
	seal(s.keys, &e)
	return e, s.db.WithContext(ctx).Create(&e).Error
}

// Get returns endpoint id, or ErrNotFound.
func (s *Endpoints) Get(ctx context.Context, db *gorm.DB, id int64) (Endpoint, error) {
	var e Endpoint
	err := db.WithContext(ctx).Where("id = ?", id).Take(&e).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Endpoint{}, ErrNotFound
	}
	if err != nil {
		return Endpoint{}, err
	}
	return e, open(s.keys, &e)
}

// List returns every endpoint, oldest first.
func (s *Endpoints) List(ctx context.Context) ([]Endpoint, error) {
	var out []Endpoint
	if err := s.db.WithContext(ctx).Order("id").Find(&out).Error; err != nil {
		return nil, err
	}
	for i := range out {
		if err := open(s.keys, &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Patch is the change of PATCH /v1/admin/webhook-endpoints/{endpoint_id}: nil fields stay.
type Patch struct {
	Status     *Status
	EventTypes []string
	URL        *string
}

// Update applies p to endpoint id: absolute values, so that sending it twice changes
// nothing the second time (naturally idempotent). Enabling a failing endpoint makes it
// enabled; disabling stops new deliveries and pauses pending ones until it is enabled again.
func (s *Endpoints) Update(ctx context.Context, id int64, p Patch) (Endpoint, error) {
	cols := map[string]any{"updated_at": clock.Now()}
	if p.Status != nil {
		cols["status"] = *p.Status
	}
	if p.EventTypes != nil {
		list, _ := json.Marshal(p.EventTypes)
		cols["event_types"] = string(list)
	}
	if p.URL != nil {
		cols["url"] = *p.URL
	}
	res := s.db.WithContext(ctx).Model(&Endpoint{}).Where("id = ?", id).Updates(cols)
	if res.Error != nil {
		return Endpoint{}, res.Error
	}
	return s.Get(ctx, s.db, id)
}

// Rotate gives endpoint id a fresh secret in tx (the guard's, so that a retried rotation
// answers the same secret and rotates once): the current one keeps signing beside it for
// grace.
func (s *Endpoints) Rotate(ctx context.Context, tx *gorm.DB, id int64, grace time.Duration) (string, error) {
	e, err := s.Get(ctx, tx, id)
	if err != nil {
		return "", err
	}
	now := clock.Now()
	until := now.Add(grace)
	next := Endpoint{ID: id, Secret: newSecret(), PreviousSecret: &e.Secret}
	seal(s.keys, &next)
	// The stored (sealed) secret read above is the precondition: of two rotations at once
	// only one matches.
	res := tx.WithContext(ctx).Model(&Endpoint{}).Where("id = ? AND secret = ?", id, e.SealedSecret).Updates(map[string]any{
		"secret": next.SealedSecret, "previous_secret": next.SealedPrevious, "secret_key_id": next.SecretKeyID,
		"previous_expires_at": until, "updated_at": now,
	})
	switch {
	case res.Error != nil:
		return "", res.Error
	case res.RowsAffected != 1:
		return "", ErrRotatedMeanwhile
	}
	return next.Secret, nil
}
