-- +goose Up
-- The merchant's side of the chain (docs/contract.md, webhooks and events).
--
-- events: one row per business change a merchant may hear of, written in the change's own
-- transaction (I17: a rolled-back change leaves no event, a committed one cannot lose it).
-- payload is the body every delivery of the event sends, byte for byte. seq is the event's
-- place in the feed, given after the commit by the sequencer under the event_sequence row's
-- lock, so that seq order is commit order and a cursor never skips an event that committed
-- late (GET /v1/admin/events); NULL until then.
CREATE TABLE events (
  id          BIGINT        NOT NULL PRIMARY KEY,
  type        VARCHAR(64)   NOT NULL,
  payload     MEDIUMBLOB    NOT NULL,
  request_id  VARCHAR(128)  NOT NULL,
  seq         BIGINT        NULL,
  created_at  DATETIME(6)   NOT NULL,
  UNIQUE KEY uk_events_seq (seq),
  KEY idx_events_created (created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- The feed's counter: one row, locked by each sequencing transaction.
CREATE TABLE event_sequence (
  name      VARCHAR(32)  NOT NULL PRIMARY KEY,
  next_seq  BIGINT       NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
INSERT INTO event_sequence (name, next_seq) VALUES ('events', 1);

-- A merchant's receiver. secret signs every attempt; during a rotation previous_secret
-- signs alongside it until previous_expires_at.
CREATE TABLE webhook_endpoints (
  id                   BIGINT         NOT NULL PRIMARY KEY,
  url                  VARCHAR(2048)  NOT NULL,
  description          VARCHAR(255)   NOT NULL DEFAULT '',
  event_types          TEXT           NOT NULL,
  status               VARCHAR(16)    NOT NULL,
  secret               VARCHAR(128)   NOT NULL,
  previous_secret      VARCHAR(128)   NULL,
  previous_expires_at  DATETIME(6)    NULL,
  created_at           DATETIME(6)    NOT NULL,
  updated_at           DATETIME(6)    NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- One delivery per endpoint and event. A sender claims a due one by a conditional UPDATE of
-- locked_until/locked_by (the lease): two instances never send the same attempt at once,
-- and a sender killed mid-attempt leaves a lease that simply expires.
CREATE TABLE webhook_deliveries (
  id               BIGINT        NOT NULL PRIMARY KEY,
  endpoint_id      BIGINT        NOT NULL,
  event_id         BIGINT        NOT NULL,
  status           VARCHAR(16)   NOT NULL,
  attempts         INT           NOT NULL DEFAULT 0,
  round_attempts   INT           NOT NULL DEFAULT 0,
  next_attempt_at  DATETIME(6)   NOT NULL,
  locked_until     DATETIME(6)   NULL,
  locked_by        VARCHAR(64)   NULL,
  created_at       DATETIME(6)   NOT NULL,
  updated_at       DATETIME(6)   NOT NULL,
  UNIQUE KEY uk_webhook_deliveries (endpoint_id, event_id),
  KEY idx_webhook_deliveries_due (status, next_attempt_at),
  KEY idx_webhook_deliveries_created (created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Every attempt sent, with what came back: the delivery log.
CREATE TABLE webhook_attempts (
  id                BIGINT        NOT NULL PRIMARY KEY,
  delivery_id       BIGINT        NOT NULL,
  endpoint_id       BIGINT        NOT NULL,
  event_id          BIGINT        NOT NULL,
  attempt           INT           NOT NULL,
  sent_at           DATETIME(6)   NOT NULL,
  status_code       INT           NOT NULL DEFAULT 0,
  latency_ms        BIGINT        NOT NULL DEFAULT 0,
  error             TEXT          NULL,
  response_snippet  TEXT          NULL,
  KEY idx_webhook_attempts_endpoint (endpoint_id, id),
  KEY idx_webhook_attempts_sent (sent_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- +goose Down
DROP TABLE webhook_attempts;
DROP TABLE webhook_deliveries;
DROP TABLE webhook_endpoints;
DROP TABLE event_sequence;
DROP TABLE events;
