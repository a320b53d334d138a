package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/segmentio/kafka-go"
)

// ReadTopic fetches every message of topic through cl, partition by partition in offset order,
// from each partition's first offset to its end at the time of the call. The chaos run's
// checker reads the broker with it, and so does apptest.
func ReadTopic(ctx context.Context, cl *kafka.Client, topic string) ([]kafka.Message, error) {
	md, err := cl.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, err
	}
	var reqs []kafka.OffsetRequest
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		if t.Error != nil {
			return nil, t.Error
		}
		for _, p := range t.Partitions {
			reqs = append(reqs, kafka.FirstOffsetOf(p.ID), kafka.LastOffsetOf(p.ID))
		}
	}
	offs, err := cl.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, err
	}
	var out []kafka.Message
	parts := offs.Topics[topic]
	sort.Slice(parts, func(i, j int) bool { return parts[i].Partition < parts[j].Partition })
	for _, p := range parts {
		if p.Error != nil {
			return nil, fmt.Errorf("partition %d: %w", p.Partition, p.Error)
		}
		for off := p.FirstOffset; off < p.LastOffset; {
			res, err := cl.Fetch(ctx, &kafka.FetchRequest{Topic: topic, Partition: p.Partition, Offset: off, MinBytes: 1, MaxBytes: 10 << 20, MaxWait: 500 * time.Millisecond})
			if err != nil {
				return nil, err
			}
			if res.Error != nil {
				return nil, res.Error
			}
			for {
				r, err := res.Records.ReadRecord()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					return nil, err
				}
				if r.Offset < off || r.Offset >= p.LastOffset {
					continue
				}
				m := kafka.Message{Topic: topic, Partition: p.Partition, Offset: r.Offset, Time: r.Time}
				if r.Key != nil {
					m.Key, _ = kafka.ReadAll(r.Key)
				}
				if r.Value != nil {
					m.Value, _ = kafka.ReadAll(r.Value)
				}
				for _, h := range r.Headers {
					m.Headers = append(m.Headers, kafka.Header(h))
				}
				out = append(out, m)
				off = r.Offset + 1
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
	}
	return out, nil
}

// Header returns the value of m's header key, or "".
func Header(m kafka.Message, key string) string {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
