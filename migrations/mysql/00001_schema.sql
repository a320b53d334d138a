-- +goose Up
-- oncepay's whole schema. Money is BIGINT cents; ids are snowflakes (BIGINT).

-- Users and the hashes of their API keys (the raw keys are never stored).
CREATE TABLE users (
  id          BIGINT       NOT NULL PRIMARY KEY,
  name        VARCHAR(64)  NOT NULL,
  created_at  DATETIME(6)  NOT NULL,
  UNIQUE KEY uk_users_name (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE api_keys (
  key_hash    CHAR(64)     NOT NULL PRIMARY KEY,
  user_id     BIGINT       NOT NULL,
  created_at  DATETIME(6)  NOT NULL,
  KEY idx_api_keys_user (user_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- One balance per user. version is the optimistic lock for read-modify-write updates.
CREATE TABLE accounts (
  user_id     BIGINT       NOT NULL PRIMARY KEY,
  balance     BIGINT       NOT NULL DEFAULT 0,
  version     BIGINT       NOT NULL DEFAULT 0,
  updated_at  DATETIME(6)  NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Stock per SKU: available + reserved + sold only changes through the admin endpoint.
CREATE TABLE inventory (
  sku         VARCHAR(64)  NOT NULL PRIMARY KEY,
  name        VARCHAR(255) NOT NULL,
  price       BIGINT       NOT NULL,
  available   BIGINT       NOT NULL,
  reserved    BIGINT       NOT NULL DEFAULT 0,
  sold        BIGINT       NOT NULL DEFAULT 0,
  version     BIGINT       NOT NULL DEFAULT 0,
  updated_at  DATETIME(6)  NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Every stock movement of an order, once per (order, sku, kind): RESERVE, CONFIRM, RELEASE.
CREATE TABLE inventory_movements (
  id          BIGINT       NOT NULL PRIMARY KEY,
  order_id    BIGINT       NOT NULL,
  sku         VARCHAR(64)  NOT NULL,
  kind        VARCHAR(16)  NOT NULL,
  quantity    BIGINT       NOT NULL,
  created_at  DATETIME(6)  NOT NULL,
  UNIQUE KEY uk_inventory_movements (order_id, sku, kind)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE orders (
  id          BIGINT       NOT NULL PRIMARY KEY,
  user_id     BIGINT       NOT NULL,
  status      VARCHAR(32)  NOT NULL,
  amount      BIGINT       NOT NULL,
  currency    CHAR(3)      NOT NULL,
  channel     VARCHAR(64)  NULL,
  trade_no    VARCHAR(128) NULL,
  created_at  DATETIME(6)  NOT NULL,
  updated_at  DATETIME(6)  NOT NULL,
  expires_at  DATETIME(6)  NOT NULL,
  paid_at     DATETIME(6)  NULL,
  KEY idx_orders_user (user_id, created_at),
  KEY idx_orders_status_expires (status, expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE order_items (
  order_id    BIGINT       NOT NULL,
  sku         VARCHAR(64)  NOT NULL,
  quantity    BIGINT       NOT NULL,
  price       BIGINT       NOT NULL,
  PRIMARY KEY (order_id, sku)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- One row per payment a channel reported; channel + trade_no is the business idempotency key.
CREATE TABLE payments (
  id          BIGINT       NOT NULL PRIMARY KEY,
  channel     VARCHAR(64)  NOT NULL,
  trade_no    VARCHAR(128) NOT NULL,
  order_id    BIGINT       NOT NULL,
  amount      BIGINT       NOT NULL,
  status      VARCHAR(32)  NOT NULL,
  request_id  VARCHAR(128) NOT NULL,
  created_at  DATETIME(6)  NOT NULL,
  UNIQUE KEY uk_payments_trade (channel, trade_no),
  KEY idx_payments_order (order_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE recharges (
  id            BIGINT       NOT NULL PRIMARY KEY,
  user_id       BIGINT       NOT NULL,
  amount        BIGINT       NOT NULL,
  status        VARCHAR(32)  NOT NULL,
  channel       VARCHAR(64)  NULL,
  trade_no      VARCHAR(128) NULL,
  created_at    DATETIME(6)  NOT NULL,
  updated_at    DATETIME(6)  NOT NULL,
  succeeded_at  DATETIME(6)  NULL,
  UNIQUE KEY uk_recharges_trade (channel, trade_no),
  KEY idx_recharges_user (user_id, created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Every balance change, once per business fact (biz_type + biz_id).
CREATE TABLE account_ledger (
  id             BIGINT       NOT NULL PRIMARY KEY,
  user_id        BIGINT       NOT NULL,
  biz_type       VARCHAR(32)  NOT NULL,
  biz_id         VARCHAR(128) NOT NULL,
  amount         BIGINT       NOT NULL,
  balance_after  BIGINT       NOT NULL,
  created_at     DATETIME(6)  NOT NULL,
  UNIQUE KEY uk_account_ledger_biz (biz_type, biz_id),
  KEY idx_account_ledger_user (user_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- The dedup table (I3): one row per scope + biz_type + biz_key, inserted first in the same
-- transaction as the business change. request_id is kept for diagnosis but is NOT unique.
CREATE TABLE idempotency_records (
  id                BIGINT       NOT NULL PRIMARY KEY,
  scope             VARCHAR(128) NOT NULL,
  biz_type          VARCHAR(64)  NOT NULL,
  biz_key           VARCHAR(255) NOT NULL,
  request_id        VARCHAR(128) NOT NULL,
  fingerprint       CHAR(64)     NOT NULL,
  status            VARCHAR(16)  NOT NULL,
  response_status   INT          NOT NULL DEFAULT 0,
  response_headers  TEXT         NULL,
  response_body     MEDIUMBLOB   NULL,
  created_at        DATETIME(6)  NOT NULL,
  updated_at        DATETIME(6)  NOT NULL,
  expires_at        DATETIME(6)  NOT NULL,
  UNIQUE KEY uk_idempotency_key (scope, biz_type, biz_key),
  KEY idx_idempotency_created (created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- The transactional outbox: events written with the change, published by the relay.
CREATE TABLE outbox (
  id            BIGINT       NOT NULL PRIMARY KEY,
  topic         VARCHAR(128) NOT NULL,
  msg_key       VARCHAR(128) NOT NULL,
  payload       MEDIUMBLOB   NOT NULL,
  request_id    VARCHAR(128) NOT NULL,
  attempts      INT          NOT NULL DEFAULT 0,
  created_at    DATETIME(6)  NOT NULL,
  published_at  DATETIME(6)  NULL,
  KEY idx_outbox_pending (published_at, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Payments that could not be applied, kept for refund and reconciliation (I5).
CREATE TABLE anomalies (
  id           BIGINT       NOT NULL PRIMARY KEY,
  kind         VARCHAR(64)  NOT NULL,
  order_id     BIGINT       NULL,
  recharge_id  BIGINT       NULL,
  channel      VARCHAR(64)  NOT NULL,
  trade_no     VARCHAR(128) NOT NULL,
  amount       BIGINT       NOT NULL,
  detail       TEXT         NOT NULL,
  request_id   VARCHAR(128) NOT NULL,
  created_at   DATETIME(6)  NOT NULL,
  UNIQUE KEY uk_anomalies_trade (kind, channel, trade_no),
  KEY idx_anomalies_created (created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- +goose Down
DROP TABLE anomalies;
DROP TABLE outbox;
DROP TABLE idempotency_records;
DROP TABLE account_ledger;
DROP TABLE recharges;
DROP TABLE payments;
DROP TABLE order_items;
DROP TABLE orders;
DROP TABLE inventory_movements;
DROP TABLE inventory;
DROP TABLE accounts;
DROP TABLE api_keys;
DROP TABLE users;
