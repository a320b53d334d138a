-- +goose Up
-- Webhook signing secrets are sealed at rest; see the MySQL twin.
ALTER TABLE webhook_endpoints ADD COLUMN secret_key_id TEXT NULL;

-- +goose Down
ALTER TABLE webhook_endpoints DROP COLUMN secret_key_id;
