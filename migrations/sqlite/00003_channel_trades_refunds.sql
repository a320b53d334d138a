-- +goose Up
-- The payment channel, outbound (docs/contract.md); see the MySQL twin for the why of each table.
CREATE TABLE trades (
  order_id      INTEGER  NOT NULL PRIMARY KEY,
  channel       TEXT     NOT NULL,
  out_trade_no  TEXT     NOT NULL,
  trade_no      TEXT     NULL,
  amount        INTEGER  NOT NULL,
  pay_url       TEXT     NULL,
  status        TEXT     NOT NULL,
  created_at    DATETIME NOT NULL,
  updated_at    DATETIME NOT NULL
);
CREATE UNIQUE INDEX uk_trades_out_trade_no ON trades (channel, out_trade_no);
CREATE INDEX idx_trades_status ON trades (status);

CREATE TABLE refunds (
  id             INTEGER  NOT NULL PRIMARY KEY,
  order_id       INTEGER  NOT NULL,
  user_id        INTEGER  NOT NULL,
  anomaly_id     INTEGER  NULL,
  channel        TEXT     NOT NULL,
  out_trade_no   TEXT     NOT NULL,
  out_refund_no  TEXT     NOT NULL,
  refund_no      TEXT     NULL,
  amount         INTEGER  NOT NULL,
  reason         TEXT     NOT NULL,
  status         TEXT     NOT NULL,
  attempts       INTEGER  NOT NULL DEFAULT 0,
  last_error     TEXT     NULL,
  created_at     DATETIME NOT NULL,
  updated_at     DATETIME NOT NULL
);
CREATE UNIQUE INDEX uk_refunds_out_refund_no ON refunds (out_refund_no);
CREATE UNIQUE INDEX uk_refunds_refund_no ON refunds (channel, refund_no);
CREATE UNIQUE INDEX uk_refunds_anomaly ON refunds (anomaly_id);
CREATE INDEX idx_refunds_order ON refunds (order_id);
CREATE INDEX idx_refunds_status ON refunds (status, updated_at);

-- +goose Down
DROP TABLE refunds;
DROP TABLE trades;
