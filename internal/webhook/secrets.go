package webhook

import (
	"context"
	"fmt"
	"strconv"

	"github.com/oncepay/oncepay/internal/platform/keyring"
)

// Signing secrets at rest (issue 27). A database dump, a replica or a backup holds the
// secrets only sealed with AES-256-GCM under ONCEPAY_WEBHOOK_KEYS, which lives in the
// environment, never in the database; each sealed value is bound to its row and column, so
// that one copied elsewhere does not open. Nothing else stores a secret: the registration's
// answer is stored nowhere (it takes no Idempotency-Key), a rotation's stored answer names the
// secret by its SHA-256 only (http.go, rotate), and no log line carries one.

// aad binds a sealed secret to its row and column.
func aad(id int64, column string) string {
	return "webhook_endpoints/" + strconv.FormatInt(id, 10) + "/" + column
}

// seal fills e's stored columns from its secrets, under the ring's first key.
func seal(keys *keyring.Ring, e *Endpoint) {
	kid, sealed := keys.Seal(e.Secret, aad(e.ID, "secret"))
	e.SealedSecret, e.SecretKeyID, e.SealedPrevious = sealed, &kid, nil
	if e.PreviousSecret != nil {
		_, prev := keys.Seal(*e.PreviousSecret, aad(e.ID, "previous_secret"))
		e.SealedPrevious = &prev
	}
}

// open fills e's secrets from its stored columns. A row without a key id is from before
// sealing and holds them in plain text (Reseal seals it).
func open(keys *keyring.Ring, e *Endpoint) error {
	if e.SecretKeyID == nil {
		e.Secret, e.PreviousSecret = e.SealedSecret, e.SealedPrevious
		return nil
	}
	s, err := keys.Open(*e.SecretKeyID, e.SealedSecret, aad(e.ID, "secret"))
	if err != nil {
		return fmt.Errorf("webhook endpoint %d: secret sealed under key %q: %w (is that key in ONCEPAY_WEBHOOK_KEYS?)", e.ID, *e.SecretKeyID, err)
	}
	e.Secret, e.PreviousSecret = s, nil
	if e.SealedPrevious != nil {
		p, err := keys.Open(*e.SecretKeyID, *e.SealedPrevious, aad(e.ID, "previous_secret"))
		if err != nil {
			return fmt.Errorf("webhook endpoint %d: previous secret: %w", e.ID, err)
		}
		e.PreviousSecret = &p
	}
	return nil
}

// Reseal seals every endpoint whose secrets are in plain text (written before sealing) or
// sealed under a key that is no longer the ring's first (a master key being rotated out), and
// returns how many it sealed. Each row is rewritten by a conditional UPDATE on the stored value
// it read, so that a rotation at the same moment wins and nothing is lost; it runs at every
// start, on every instance.
func (s *Endpoints) Reseal(ctx context.Context) (int, error) {
	var rows []Endpoint
	err := s.db.WithContext(ctx).Where("secret_key_id IS NULL OR secret_key_id <> ?", s.keys.Primary()).Find(&rows).Error
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range rows {
		if err := open(s.keys, &e); err != nil {
			return n, err
		}
		stored := e.SealedSecret
		seal(s.keys, &e)
		res := s.db.WithContext(ctx).Model(&Endpoint{}).Where("id = ? AND secret = ?", e.ID, stored).
			Updates(map[string]any{"secret": e.SealedSecret, "previous_secret": e.SealedPrevious, "secret_key_id": e.SecretKeyID})
		if res.Error != nil {
			return n, res.Error
		}
		n += int(res.RowsAffected)
	}
	return n, nil
}

// UseKeys makes s open the endpoints' secrets with keys (ONCEPAY_WEBHOOK_KEYS).
func (s *Sender) UseKeys(keys *keyring.Ring) *Sender {
	s.keys = keys
	return s
}
