package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/requestid"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// TestAnnounceRollsBack is I17 at the writer: the merchant's event is a row of the change's
// transaction, so a change that rolls back leaves none, and a committed one leaves exactly its
// envelope — event_id, type, created_at and the resource as data — with the request id.
func TestAnnounceRollsBack(t *testing.T) {
	db := testenv.DB(t)
	gen, err := ids.New(9)
	if err != nil {
		t.Fatal(err)
	}
	w := outbox.NewWriter(gen)
	ctx := requestid.With(context.Background(), "req-announce")
	errChange := errors.New("the business change failed")
	err = db.Transaction(func(tx *gorm.DB) error {
		if err := w.Announce(ctx, tx, outbox.OrderPaid, map[string]string{"order_id": "1"}); err != nil {
			return err
		}
		return errChange
	})
	if !errors.Is(err, errChange) {
		t.Fatalf("transaction: %v, want the change's error", err)
	}
	var rows []outbox.Event
	if err := db.Find(&rows).Error; err != nil || len(rows) != 0 {
		t.Fatalf("%d events after a rollback (%v), want 0", len(rows), err)
	}
	if err := db.Transaction(func(tx *gorm.DB) error {
		return w.Announce(ctx, tx, outbox.OrderPaid, map[string]string{"order_id": "2"})
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Find(&rows).Error; err != nil || len(rows) != 1 {
		t.Fatalf("%d events after a commit (%v), want 1", len(rows), err)
	}
	var env outbox.Envelope
	if err := json.Unmarshal(rows[0].Payload, &env); err != nil {
		t.Fatal(err)
	}
	if env.EventID != ids.Format(rows[0].ID) || env.Type != outbox.OrderPaid || string(env.Data) != `{"order_id":"2"}` ||
		env.CreatedAt == "" || rows[0].RequestID != "req-announce" || rows[0].Seq != nil {
		t.Errorf("event %+v, envelope %+v", rows[0], env)
	}
}
