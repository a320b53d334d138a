-- +goose Up
-- Every string column of a primary or unique key compares bytes, not only those that hold what
-- a client or a channel sent (00002): these hold values oncepay chooses itself (a hash in hex,
-- a number space, a movement's kind, the feed's name), which no collation could fold into one
-- another today, but a rule with exceptions is one a new table gets wrong.
-- TestKeyColumnsAreByteExact reads the rule from information_schema.
ALTER TABLE api_keys            MODIFY key_hash VARBINARY(64) NOT NULL;
ALTER TABLE inventory_movements MODIFY kind     VARBINARY(16) NOT NULL;
ALTER TABLE report_claims       MODIFY space    VARBINARY(16) NOT NULL;
ALTER TABLE anomalies           MODIFY space    VARBINARY(16) NOT NULL DEFAULT 'trade';
ALTER TABLE event_sequence      MODIFY name     VARBINARY(32) NOT NULL;

-- +goose Down
ALTER TABLE event_sequence      MODIFY name     VARCHAR(32) NOT NULL;
ALTER TABLE anomalies           MODIFY space    VARCHAR(16) NOT NULL DEFAULT 'trade';
ALTER TABLE report_claims       MODIFY space    VARCHAR(16) NOT NULL;
ALTER TABLE inventory_movements MODIFY kind     VARCHAR(16) NOT NULL;
ALTER TABLE api_keys            MODIFY key_hash CHAR(64)    NOT NULL;
