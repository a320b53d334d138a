-- +goose Up
-- One inbound port for channel reports; see the MySQL twin for the why.
CREATE TABLE report_claims (
  channel     TEXT     NOT NULL,
  space       TEXT     NOT NULL,
  channel_no  TEXT     NOT NULL,
  owner_kind  TEXT     NOT NULL,
  owner_no    TEXT     NOT NULL,
  created_at  DATETIME NOT NULL,
  PRIMARY KEY (channel, space, channel_no)
);

INSERT OR IGNORE INTO report_claims (channel, space, channel_no, owner_kind, owner_no, created_at)
  SELECT channel, 'trade', trade_no, 'trade', CAST(order_id AS TEXT), created_at FROM payments;
INSERT OR IGNORE INTO report_claims (channel, space, channel_no, owner_kind, owner_no, created_at)
  SELECT channel, 'trade', trade_no, 'recharge', CAST(id AS TEXT), updated_at FROM recharges WHERE trade_no IS NOT NULL;
INSERT OR IGNORE INTO report_claims (channel, space, channel_no, owner_kind, owner_no, created_at)
  SELECT channel, 'trade', trade_no, 'trade', CAST(order_id AS TEXT), created_at FROM anomalies
  WHERE kind IN ('paid_after_close', 'duplicate_payment') AND order_id IS NOT NULL;
INSERT OR IGNORE INTO report_claims (channel, space, channel_no, owner_kind, owner_no, created_at)
  SELECT channel, 'trade', trade_no, 'recharge', CAST(recharge_id AS TEXT), created_at FROM anomalies
  WHERE kind = 'duplicate_payment' AND recharge_id IS NOT NULL;
INSERT OR IGNORE INTO report_claims (channel, space, channel_no, owner_kind, owner_no, created_at)
  SELECT channel, 'refund', refund_no, 'refund', out_refund_no, updated_at FROM refunds WHERE refund_no IS NOT NULL;

-- SQLite cannot drop a NOT NULL in place: the refunds table is rebuilt with order_id NULL.
CREATE TABLE refunds_new (
  id              INTEGER  NOT NULL PRIMARY KEY,
  order_id        INTEGER  NULL,
  recharge_id     INTEGER  NULL,
  user_id         INTEGER  NOT NULL,
  anomaly_id      INTEGER  NULL,
  channel         TEXT     NOT NULL,
  out_trade_no    TEXT     NOT NULL,
  trade_no        TEXT     NULL,
  out_refund_no   TEXT     NOT NULL,
  refund_no       TEXT     NULL,
  amount          INTEGER  NOT NULL,
  reason          TEXT     NOT NULL,
  status          TEXT     NOT NULL,
  channel_status  TEXT     NULL,
  attempts        INTEGER  NOT NULL DEFAULT 0,
  last_error      TEXT     NULL,
  created_at      DATETIME NOT NULL,
  updated_at      DATETIME NOT NULL
);
INSERT INTO refunds_new (id, order_id, user_id, anomaly_id, channel, out_trade_no, out_refund_no, refund_no,
                         amount, reason, status, attempts, last_error, created_at, updated_at)
  SELECT id, order_id, user_id, anomaly_id, channel, out_trade_no, out_refund_no, refund_no,
         amount, reason, status, attempts, last_error, created_at, updated_at FROM refunds;
DROP TABLE refunds;
ALTER TABLE refunds_new RENAME TO refunds;
CREATE UNIQUE INDEX uk_refunds_out_refund_no ON refunds (out_refund_no);
CREATE UNIQUE INDEX uk_refunds_refund_no ON refunds (channel, refund_no);
CREATE UNIQUE INDEX uk_refunds_anomaly ON refunds (anomaly_id);
CREATE INDEX idx_refunds_order ON refunds (order_id);
CREATE INDEX idx_refunds_status ON refunds (status, updated_at);

-- +goose Down
DROP TABLE report_claims;
