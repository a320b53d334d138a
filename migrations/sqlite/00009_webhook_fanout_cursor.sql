-- +goose Up
-- The fan-out's cursor; see the MySQL twin for the why.
INSERT INTO event_sequence (name, next_seq) SELECT 'fanout', next_seq FROM event_sequence WHERE name = 'events';

-- +goose Down
DELETE FROM event_sequence WHERE name = 'fanout';
