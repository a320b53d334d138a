-- +goose Up
-- The payment channel, outbound (docs/contract.md). Key columns are VARBINARY: they compare byte
-- for byte, like every key of 00002.

-- One channel trade per order (out_trade_no = the order id). The row is committed OPENING
-- before the channel is called and becomes OPEN with the channel's answer, so that the close
-- job and reconciliation ask the channel about every order that may have a trade there (I9).
CREATE TABLE trades (
  order_id      BIGINT          NOT NULL PRIMARY KEY,
  channel       VARBINARY(64)   NOT NULL,
  out_trade_no  VARBINARY(128)  NOT NULL,
  trade_no      VARBINARY(128)  NULL,
  amount        BIGINT          NOT NULL,
  pay_url       TEXT            NULL,
  status        VARCHAR(16)     NOT NULL,
  created_at    DATETIME(6)     NOT NULL,
  updated_at    DATETIME(6)     NOT NULL,
  UNIQUE KEY uk_trades_out_trade_no (channel, out_trade_no),
  KEY idx_trades_status (status)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Refunds follow recovery points (I8): committed PENDING with a fresh out_refund_no before the
-- channel is called, SUBMITTED when it answered, SUCCEEDED or FAILED by notification or query.
-- out_refund_no is unique, so a retry can only ever reuse it; anomaly_id is unique, so an
-- anomaly (paid_after_close, duplicate_payment) is refunded at most once.
CREATE TABLE refunds (
  id             BIGINT          NOT NULL PRIMARY KEY,
  order_id       BIGINT          NOT NULL,
  user_id        BIGINT          NOT NULL,
  anomaly_id     BIGINT          NULL,
  channel        VARBINARY(64)   NOT NULL,
  out_trade_no   VARBINARY(128)  NOT NULL,
  out_refund_no  VARBINARY(128)  NOT NULL,
  refund_no      VARBINARY(128)  NULL,
  amount         BIGINT          NOT NULL,
  reason         VARCHAR(255)    NOT NULL,
  status         VARCHAR(16)     NOT NULL,
  attempts       INT             NOT NULL DEFAULT 0,
  last_error     TEXT            NULL,
  created_at     DATETIME(6)     NOT NULL,
  updated_at     DATETIME(6)     NOT NULL,
  UNIQUE KEY uk_refunds_out_refund_no (out_refund_no),
  UNIQUE KEY uk_refunds_refund_no (channel, refund_no),
  UNIQUE KEY uk_refunds_anomaly (anomaly_id),
  KEY idx_refunds_order (order_id),
  KEY idx_refunds_status (status, updated_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Anomaly kinds grow with reconciliation (reconcile_*): the column stays VARBINARY(64).

-- +goose Down
DROP TABLE refunds;
DROP TABLE trades;
