-- +goose Up
-- The PENDING recharges of the last day, for reconcile-payments; see the MySQL twin.
CREATE INDEX idx_recharges_status ON recharges (status, created_at);

-- +goose Down
DROP INDEX idx_recharges_status;
