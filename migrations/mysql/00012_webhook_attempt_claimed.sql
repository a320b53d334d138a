-- +goose Up
-- When each attempt's lease was claimed, on the database's clock the claim compared with. An
-- attempt claimed before a redelivery of its delivery committed belongs to the round before it,
-- and the redelivery follows it even when it is answered 2xx (webhook.Sender.record); the time
-- of the claim, not of the send, tells which round a 2xx ended. Attempts logged before this
-- migration have none.
ALTER TABLE webhook_attempts ADD COLUMN claimed_at DATETIME(6) NULL AFTER attempt;

-- +goose Down
ALTER TABLE webhook_attempts DROP COLUMN claimed_at;
