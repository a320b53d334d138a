-- +goose Up
-- The fan-out's cursor (issue 27): the first seq whose deliveries are not created yet. The
-- sequencer fans events out after the counter's transaction has committed, under this row's
-- lock, so that the counter is held for the seqs alone (with 200 endpoints the fan-out of
-- 200 events held it 1.7 s). Every event sequenced before this migration was fanned out in its
-- sequencing transaction: the cursor starts where the counter stands.
INSERT INTO event_sequence (name, next_seq) SELECT 'fanout', next_seq FROM event_sequence WHERE name = 'events';

-- +goose Down
DELETE FROM event_sequence WHERE name = 'fanout';
