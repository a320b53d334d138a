// Command webhook-receiver is a merchant's receiver of oncepay's webhooks that processes each
// event once (I16: a webhook processed twice). oncepay delivers at least once — a receiver
// whose 2xx is lost is sent the same event again — so the receiver does the dedup: it records
// the event's id in the same transaction as its own effect. A copy that comes again finds the
// id already recorded, answers 2xx (so that oncepay stops) and changes nothing.
//
// Its effect here is a shipment per paid order: a row that a second processing would add
// twice, exactly like the second credit of I2 or the second stock deduction of I1.
package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// ProcessedEvent is the receiver's dedup record: one row per event id it has acted on,
// committed with the effect or not at all.
type ProcessedEvent struct {
	EventID     string `gorm:"primaryKey;size:32"`
	Type        string `gorm:"size:64"`
	ProcessedAt time.Time
}

// Shipment is the receiver's effect: one per order.paid event processed.
type Shipment struct {
	ID      int64  `gorm:"primaryKey;autoIncrement" json:"id"`
	OrderID string `gorm:"size:32" json:"order_id"`
	EventID string `gorm:"size:32" json:"event_id"`
}

// Event is the body oncepay POSTs.
type Event struct {
	EventID   string          `json:"event_id"`
	Type      string          `json:"type"`
	CreatedAt string          `json:"created_at"`
	Data      json.RawMessage `json:"data"`
}

// Receiver verifies and processes oncepay's webhooks.
type Receiver struct {
	db *gorm.DB
	// Secrets are the endpoint's signing secrets: the one from registration, and the new one
	// during a rotation (both are accepted while oncepay signs with both).
	Secrets []string
	// Tolerance is how far the signed webhook-timestamp may lie from the receiver's clock: a
	// captured request replayed later is refused, since the timestamp is inside the MAC.
	Tolerance time.Duration
	// Dedup, when false, skips the dedup record: the naive receiver of I16, for the drill.
	Dedup bool
}

// MinKeyBytes is the shortest signing key a secret may carry: the specification's 24 bytes.
const MinKeyBytes = 24

// checkSecret refuses a secret that is not whsec_ and the base64 of at least MinKeyBytes: an
// empty one — a trailing comma in WEBHOOK_SECRET, or "whsec_" alone — would be an HMAC key
// of zero bytes, which anyone can sign with.
func checkSecret(secret string) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || len(key) < MinKeyBytes {
		return fmt.Errorf("a secret must be whsec_ and the base64 of at least %d bytes, as oncepay answers it", MinKeyBytes)
	}
	return nil
}

// New returns a receiver on db, creating its tables; every secret must be a real one.
func New(db *gorm.DB, secrets []string, tolerance time.Duration) (*Receiver, error) {
	if len(secrets) == 0 {
		return nil, errors.New("no secret given")
	}
	for i, s := range secrets {
		if err := checkSecret(s); err != nil {
			return nil, fmt.Errorf("secret %d: %w", i+1, err)
		}
	}
	if err := db.AutoMigrate(&ProcessedEvent{}, &Shipment{}); err != nil {
		return nil, err
	}
	return &Receiver{db: db, Secrets: secrets, Tolerance: tolerance, Dedup: true}, nil
}

var errSignature = errors.New("signature does not verify")

// ServeHTTP answers one delivery: 400 for a body whose signature or timestamp does not
// verify (oncepay logs it and retries, and an operator sees it in the delivery log), 200 once
// the event is processed or was already, 500 when processing failed (nothing committed: the
// retry processes it).
func (rc *Receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "cannot read the body", http.StatusBadRequest)
		return
	}
	id, err := rc.Verify(r.Header, body, time.Now())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var ev Event
	if err := json.Unmarshal(body, &ev); err != nil || ev.EventID != id {
		http.Error(w, "not an event, or not the event webhook-id names", http.StatusBadRequest)
		return
	}
	dup, err := rc.Process(r.Context(), ev)
	if err != nil {
		slog.Error("processing failed; oncepay will retry", "event_id", ev.EventID, "err", err)
		http.Error(w, "processing failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"duplicate":` + strconv.FormatBool(dup) + "}"))
}

// Verify checks a delivery's Standard Webhooks headers against body with the specification's
// own Go library (github.com/standard-webhooks/standard-webhooks/libraries): webhook-timestamp
// within Tolerance of now (checked here, so that the tolerance is the receiver's), and some
// "v1,<base64>" of the space-separated webhook-signature the HMAC-SHA256 of
// "<webhook-id>.<webhook-timestamp>.<body>" under one of the secrets, compared in constant
// time. It returns the signed webhook-id: the event id to deduplicate by, which the MAC covers.
func (rc *Receiver) Verify(h http.Header, body []byte, now time.Time) (string, error) {
	id := h.Get(standardwebhooks.HeaderWebhookID)
	sec, err := strconv.ParseInt(h.Get(standardwebhooks.HeaderWebhookTimestamp), 10, 64)
	if err != nil || id == "" {
		return "", errSignature
	}
	if d := now.Sub(time.Unix(sec, 0)); d > rc.Tolerance || d < -rc.Tolerance {
		return "", errors.New("timestamp outside the tolerance")
	}
	for _, secret := range rc.Secrets {
		if checkSecret(secret) != nil {
			continue // never an empty or short key, which anyone could sign with
		}
		wh, err := standardwebhooks.NewWebhook(secret)
		if err == nil && wh.VerifyIgnoringTimestamp(body, h) == nil {
			return id, nil
		}
	}
	return "", errSignature
}

// Process acts on ev once, in one transaction: first the dedup record — a copy whose record
// is already there (committed by an earlier copy, or by a concurrent one the database made
// it wait for) is a duplicate, and its transaction changes nothing — then the effect. A
// failure rolls both back, so that the retry processes the event. It reports whether ev was
// a duplicate.
func (rc *Receiver) Process(ctx context.Context, ev Event) (dup bool, err error) {
	err = rc.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if rc.Dedup {
			res := tx.Clauses(clause.OnConflict{DoNothing: true}).
				Create(&ProcessedEvent{EventID: ev.EventID, Type: ev.Type, ProcessedAt: time.Now().UTC()})
			if res.Error != nil {
				return res.Error
			}
			if res.RowsAffected == 0 {
				dup = true
				return nil
			}
		}
		return rc.apply(tx, ev)
	})
	return dup, err
}

// apply is the effect: a shipment for each paid order.
func (rc *Receiver) apply(tx *gorm.DB, ev Event) error {
	if ev.Type != "order.paid" {
		return nil
	}
	var order struct {
		OrderID string `json:"order_id"`
	}
	if err := json.Unmarshal(ev.Data, &order); err != nil || order.OrderID == "" {
		return errors.New("order.paid without an order_id")
	}
	return tx.Create(&Shipment{OrderID: order.OrderID, EventID: ev.EventID}).Error
}
