-- +goose Up
-- An anomaly names a channel's number: a trade_no, or a refund_no. The two are different
-- number spaces (report_claims keeps them apart too), so that a trade and a refund that
-- happen to share a string each keep their anomaly: the unique key gains the space.
ALTER TABLE anomalies ADD COLUMN space VARCHAR(16) NOT NULL DEFAULT 'trade' AFTER channel;
UPDATE anomalies SET space = 'refund' WHERE kind = 'refund_status_conflict';
ALTER TABLE anomalies DROP INDEX uk_anomalies_trade, ADD UNIQUE KEY uk_anomalies_trade (kind, channel, space, trade_no);

-- +goose Down
ALTER TABLE anomalies DROP INDEX uk_anomalies_trade, ADD UNIQUE KEY uk_anomalies_trade (kind, channel, trade_no);
ALTER TABLE anomalies DROP COLUMN space;
