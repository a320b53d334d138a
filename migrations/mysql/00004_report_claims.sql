-- +goose Up
-- One inbound port for channel reports (docs/architecture.md). A channel number names one
-- payment, whatever it pays, and one refund: the first report that applies under a number
-- claims it for its owner, and the claim is never purged, so that with every dedup record
-- gone the claims and the state machine alone refuse a report naming another owner (I13).
-- space is 'trade' (orders and recharges share the channel's trade numbers) or 'refund'.
CREATE TABLE report_claims (
  channel     VARBINARY(64)   NOT NULL,
  space       VARCHAR(16)     NOT NULL,
  channel_no  VARBINARY(128)  NOT NULL,
  owner_kind  VARCHAR(16)     NOT NULL,
  owner_no    VARBINARY(128)  NOT NULL,
  created_at  DATETIME(6)     NOT NULL,
  PRIMARY KEY (channel, space, channel_no)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Every number a report already applied under belongs to what it paid or was kept for.
INSERT IGNORE INTO report_claims (channel, space, channel_no, owner_kind, owner_no, created_at)
  SELECT channel, 'trade', trade_no, 'trade', CAST(order_id AS CHAR), created_at FROM payments;
INSERT IGNORE INTO report_claims (channel, space, channel_no, owner_kind, owner_no, created_at)
  SELECT channel, 'trade', trade_no, 'recharge', CAST(id AS CHAR), updated_at FROM recharges WHERE trade_no IS NOT NULL;
INSERT IGNORE INTO report_claims (channel, space, channel_no, owner_kind, owner_no, created_at)
  SELECT channel, 'trade', trade_no, 'trade', CAST(order_id AS CHAR), created_at FROM anomalies
  WHERE kind IN ('paid_after_close', 'duplicate_payment') AND order_id IS NOT NULL;
INSERT IGNORE INTO report_claims (channel, space, channel_no, owner_kind, owner_no, created_at)
  SELECT channel, 'trade', trade_no, 'recharge', CAST(recharge_id AS CHAR), created_at FROM anomalies
  WHERE kind = 'duplicate_payment' AND recharge_id IS NOT NULL;
INSERT IGNORE INTO report_claims (channel, space, channel_no, owner_kind, owner_no, created_at)
  SELECT channel, 'refund', refund_no, 'refund', out_refund_no, updated_at FROM refunds WHERE refund_no IS NOT NULL;

-- Refunds of payments kept as anomalies (paid_after_close, duplicate_payment) go back by the
-- channel's trade_no, through the channel that took them, whether they paid an order or a
-- recharge; channel_status is what the channel said last about the refund (a FAILED refund
-- the channel later reports SUCCESS keeps FAILED, with SUCCESS here and an anomaly).
ALTER TABLE refunds MODIFY order_id BIGINT NULL,
                    ADD COLUMN recharge_id BIGINT NULL AFTER order_id,
                    ADD COLUMN trade_no VARBINARY(128) NULL AFTER out_trade_no,
                    ADD COLUMN channel_status VARCHAR(32) NULL AFTER status;

-- +goose Down
ALTER TABLE refunds DROP COLUMN channel_status, DROP COLUMN trade_no, DROP COLUMN recharge_id;
DROP TABLE report_claims;
