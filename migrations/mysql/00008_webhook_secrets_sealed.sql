-- +goose Up
-- Webhook signing secrets are sealed at rest (AES-256-GCM under ONCEPAY_WEBHOOK_KEYS, issue 27):
-- secret and previous_secret hold base64(nonce ‖ ciphertext ‖ tag), wider than the plain
-- secret, and secret_key_id names the key that sealed both. NULL is a row written before this
-- migration, still in plain text: every start seals such rows, and rows sealed under a key
-- that is no longer the first of the ring, again.
ALTER TABLE webhook_endpoints
  MODIFY secret VARCHAR(255) NOT NULL,
  MODIFY previous_secret VARCHAR(255) NULL,
  ADD COLUMN secret_key_id VARCHAR(32) NULL;

-- +goose Down
ALTER TABLE webhook_endpoints DROP COLUMN secret_key_id;
