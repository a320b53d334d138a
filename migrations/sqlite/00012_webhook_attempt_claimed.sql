-- +goose Up
-- When each attempt's lease was claimed (see the MySQL migration of the same number).
ALTER TABLE webhook_attempts ADD COLUMN claimed_at DATETIME NULL;

-- +goose Down
ALTER TABLE webhook_attempts DROP COLUMN claimed_at;
