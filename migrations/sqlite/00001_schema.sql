-- +goose Up
-- oncepay's whole schema. Money is BIGINT cents; ids are snowflakes (BIGINT).

-- Users and the hashes of their API keys (the raw keys are never stored).
CREATE TABLE users (
  id          INTEGER      NOT NULL PRIMARY KEY,
  name        VARCHAR(64)  NOT NULL,
  created_at  DATETIME  NOT NULL
);
CREATE UNIQUE INDEX uk_users_name ON users (name);

CREATE TABLE api_keys (
  key_hash    CHAR(64)     NOT NULL PRIMARY KEY,
  user_id     BIGINT       NOT NULL,
  created_at  DATETIME  NOT NULL
);
CREATE INDEX idx_api_keys_user ON api_keys (user_id);

-- One balance per user. version is the optimistic lock for read-modify-write updates.
CREATE TABLE accounts (
  user_id     INTEGER      NOT NULL PRIMARY KEY,
  balance     BIGINT       NOT NULL DEFAULT 0,
  version     BIGINT       NOT NULL DEFAULT 0,
  updated_at  DATETIME  NOT NULL
);

-- Stock per SKU: available + reserved + sold only changes through the admin endpoint.
CREATE TABLE inventory (
  sku         VARCHAR(64)  NOT NULL PRIMARY KEY,
  name        VARCHAR(255) NOT NULL,
  price       BIGINT       NOT NULL,
  available   BIGINT       NOT NULL,
  reserved    BIGINT       NOT NULL DEFAULT 0,
  sold        BIGINT       NOT NULL DEFAULT 0,
  version     BIGINT       NOT NULL DEFAULT 0,
  updated_at  DATETIME  NOT NULL
);

-- Every stock movement of an order, once per (order, sku, kind): RESERVE, CONFIRM, RELEASE.
CREATE TABLE inventory_movements (
  id          INTEGER      NOT NULL PRIMARY KEY,
  order_id    BIGINT       NOT NULL,
  sku         VARCHAR(64)  NOT NULL,
  kind        VARCHAR(16)  NOT NULL,
  quantity    BIGINT       NOT NULL,
  created_at  DATETIME  NOT NULL
);
CREATE UNIQUE INDEX uk_inventory_movements ON inventory_movements (order_id, sku, kind);

CREATE TABLE orders (
  id          INTEGER      NOT NULL PRIMARY KEY,
  user_id     BIGINT       NOT NULL,
  status      VARCHAR(32)  NOT NULL,
  amount      BIGINT       NOT NULL,
  currency    CHAR(3)      NOT NULL,
  channel     VARCHAR(64)  NULL,
  trade_no    VARCHAR(128) NULL,
  created_at  DATETIME  NOT NULL,
  updated_at  DATETIME  NOT NULL,
  expires_at  DATETIME  NOT NULL,
  paid_at     DATETIME  NULL
);
CREATE INDEX idx_orders_user ON orders (user_id, created_at);
CREATE INDEX idx_orders_status_expires ON orders (status, expires_at);

CREATE TABLE order_items (
  order_id    BIGINT       NOT NULL,
  sku         VARCHAR(64)  NOT NULL,
  quantity    BIGINT       NOT NULL,
  price       BIGINT       NOT NULL,
  PRIMARY KEY (order_id, sku)
);

-- One row per payment a channel reported; channel + trade_no is the business idempotency key.
CREATE TABLE payments (
  id          INTEGER      NOT NULL PRIMARY KEY,
  channel     VARCHAR(64)  NOT NULL,
  trade_no    VARCHAR(128) NOT NULL,
  order_id    BIGINT       NOT NULL,
  amount      BIGINT       NOT NULL,
  status      VARCHAR(32)  NOT NULL,
  request_id  VARCHAR(128) NOT NULL,
  created_at  DATETIME  NOT NULL
);
CREATE UNIQUE INDEX uk_payments_trade ON payments (channel, trade_no);
CREATE INDEX idx_payments_order ON payments (order_id);

CREATE TABLE recharges (
  id            INTEGER      NOT NULL PRIMARY KEY,
  user_id       BIGINT       NOT NULL,
  amount        BIGINT       NOT NULL,
  status        VARCHAR(32)  NOT NULL,
  channel       VARCHAR(64)  NULL,
  trade_no      VARCHAR(128) NULL,
  created_at    DATETIME  NOT NULL,
  updated_at    DATETIME  NOT NULL,
  succeeded_at  DATETIME  NULL
);
CREATE UNIQUE INDEX uk_recharges_trade ON recharges (channel, trade_no);
CREATE INDEX idx_recharges_user ON recharges (user_id, created_at);

-- Every balance change, once per business fact (biz_type + biz_id).
CREATE TABLE account_ledger (
  id             INTEGER      NOT NULL PRIMARY KEY,
  user_id        BIGINT       NOT NULL,
  biz_type       VARCHAR(32)  NOT NULL,
  biz_id         VARCHAR(128) NOT NULL,
  amount         BIGINT       NOT NULL,
  balance_after  BIGINT       NOT NULL,
  created_at     DATETIME  NOT NULL
);
CREATE UNIQUE INDEX uk_account_ledger_biz ON account_ledger (biz_type, biz_id);
CREATE INDEX idx_account_ledger_user ON account_ledger (user_id);

-- The dedup table (I3): one row per scope + biz_type + biz_key, inserted first in the same
-- transaction as the business change. request_id is kept for diagnosis but is NOT unique.
CREATE TABLE idempotency_records (
  id                INTEGER      NOT NULL PRIMARY KEY,
  scope             VARCHAR(128) NOT NULL,
  biz_type          VARCHAR(64)  NOT NULL,
  biz_key           VARCHAR(255) NOT NULL,
  request_id        VARCHAR(128) NOT NULL,
  fingerprint       CHAR(64)     NOT NULL,
  status            VARCHAR(16)  NOT NULL,
  response_status   INT          NOT NULL DEFAULT 0,
  response_headers  TEXT         NULL,
  response_body     BLOB   NULL,
  created_at        DATETIME  NOT NULL,
  updated_at        DATETIME  NOT NULL,
  expires_at        DATETIME  NOT NULL
);
CREATE UNIQUE INDEX uk_idempotency_key ON idempotency_records (scope, biz_type, biz_key);
CREATE INDEX idx_idempotency_created ON idempotency_records (created_at);

-- The transactional outbox: events written with the change, published by the relay.
CREATE TABLE outbox (
  id            INTEGER      NOT NULL PRIMARY KEY,
  topic         VARCHAR(128) NOT NULL,
  msg_key       VARCHAR(128) NOT NULL,
  payload       BLOB   NOT NULL,
  request_id    VARCHAR(128) NOT NULL,
  attempts      INT          NOT NULL DEFAULT 0,
  created_at    DATETIME  NOT NULL,
  published_at  DATETIME  NULL
);
CREATE INDEX idx_outbox_pending ON outbox (published_at, id);

-- Payments that could not be applied, kept for refund and reconciliation (I5).
CREATE TABLE anomalies (
  id           INTEGER      NOT NULL PRIMARY KEY,
  kind         VARCHAR(64)  NOT NULL,
  order_id     BIGINT       NULL,
  recharge_id  BIGINT       NULL,
  channel      VARCHAR(64)  NOT NULL,
  trade_no     VARCHAR(128) NOT NULL,
  amount       BIGINT       NOT NULL,
  detail       TEXT         NOT NULL,
  request_id   VARCHAR(128) NOT NULL,
  created_at   DATETIME  NOT NULL
);
CREATE UNIQUE INDEX uk_anomalies_trade ON anomalies (kind, channel, trade_no);
CREATE INDEX idx_anomalies_created ON anomalies (created_at);

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
