-- +goose Up
-- reconcile-payments asks the channel about the PENDING recharges of the last day
-- (internal/payment/recharges.go): an index on (status, created_at) finds them without a scan.
ALTER TABLE recharges ADD KEY idx_recharges_status (status, created_at);

-- +goose Down
ALTER TABLE recharges DROP INDEX idx_recharges_status;
