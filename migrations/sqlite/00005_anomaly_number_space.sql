-- +goose Up
-- An anomaly's number is a trade_no or a refund_no; see the MySQL twin.
ALTER TABLE anomalies ADD COLUMN space TEXT NOT NULL DEFAULT 'trade';
UPDATE anomalies SET space = 'refund' WHERE kind = 'refund_status_conflict';
DROP INDEX uk_anomalies_trade;
CREATE UNIQUE INDEX uk_anomalies_trade ON anomalies (kind, channel, space, trade_no);

-- +goose Down
DROP INDEX uk_anomalies_trade;
CREATE UNIQUE INDEX uk_anomalies_trade ON anomalies (kind, channel, trade_no);
