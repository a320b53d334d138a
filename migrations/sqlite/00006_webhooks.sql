-- +goose Up
-- The merchant's side of the chain; see the MySQL twin for the why.
CREATE TABLE events (
  id          INTEGER   NOT NULL PRIMARY KEY,
  type        TEXT      NOT NULL,
  payload     BLOB      NOT NULL,
  request_id  TEXT      NOT NULL,
  seq         INTEGER   NULL,
  created_at  DATETIME  NOT NULL
);
CREATE UNIQUE INDEX uk_events_seq ON events (seq);
CREATE INDEX idx_events_created ON events (created_at);

CREATE TABLE event_sequence (
  name      TEXT     NOT NULL PRIMARY KEY,
  next_seq  INTEGER  NOT NULL
);
INSERT INTO event_sequence (name, next_seq) VALUES ('events', 1);

CREATE TABLE webhook_endpoints (
  id                   INTEGER   NOT NULL PRIMARY KEY,
  url                  TEXT      NOT NULL,
  description          TEXT      NOT NULL DEFAULT '',
  event_types          TEXT      NOT NULL,
  status               TEXT      NOT NULL,
  secret               TEXT      NOT NULL,
  previous_secret      TEXT      NULL,
  previous_expires_at  DATETIME  NULL,
  created_at           DATETIME  NOT NULL,
  updated_at           DATETIME  NOT NULL
);

CREATE TABLE webhook_deliveries (
  id               INTEGER   NOT NULL PRIMARY KEY,
  endpoint_id      INTEGER   NOT NULL,
  event_id         INTEGER   NOT NULL,
  status           TEXT      NOT NULL,
  attempts         INTEGER   NOT NULL DEFAULT 0,
  round_attempts   INTEGER   NOT NULL DEFAULT 0,
  next_attempt_at  DATETIME  NOT NULL,
  locked_until     DATETIME  NULL,
  locked_by        TEXT      NULL,
  created_at       DATETIME  NOT NULL,
  updated_at       DATETIME  NOT NULL
);
CREATE UNIQUE INDEX uk_webhook_deliveries ON webhook_deliveries (endpoint_id, event_id);
CREATE INDEX idx_webhook_deliveries_due ON webhook_deliveries (status, next_attempt_at);
CREATE INDEX idx_webhook_deliveries_created ON webhook_deliveries (created_at);

CREATE TABLE webhook_attempts (
  id                INTEGER   NOT NULL PRIMARY KEY,
  delivery_id       INTEGER   NOT NULL,
  endpoint_id       INTEGER   NOT NULL,
  event_id          INTEGER   NOT NULL,
  attempt           INTEGER   NOT NULL,
  sent_at           DATETIME  NOT NULL,
  status_code       INTEGER   NOT NULL DEFAULT 0,
  latency_ms        INTEGER   NOT NULL DEFAULT 0,
  error             TEXT      NULL,
  response_snippet  TEXT      NULL
);
CREATE INDEX idx_webhook_attempts_endpoint ON webhook_attempts (endpoint_id, id);
CREATE INDEX idx_webhook_attempts_sent ON webhook_attempts (sent_at);

-- +goose Down
DROP TABLE webhook_attempts;
DROP TABLE webhook_deliveries;
DROP TABLE webhook_endpoints;
DROP TABLE event_sequence;
DROP TABLE events;
