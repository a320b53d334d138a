// Command merchant places orders with oncepay's Go client and survives a crash between
// sending an order and hearing its answer. Each order's Idempotency-Key is written to a
// journal before the first attempt leaves (client.Config.BeforeSend); a restart resumes every
// order the journal holds without an answer, under its own key and with its own bytes, so
// oncepay answers it with the order it already made. Sending it again under a new key would
// order twice (I18).
//
//	go run ./merchant -url http://127.0.0.1:8080 -api-key demo-alice-key -sku SKU-1002
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"sync"

	"github.com/oncepay/oncepay/client"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:8080", "oncepay's base URL")
	apiKey := flag.String("api-key", "demo-alice-key", "the user's API key")
	sku := flag.String("sku", "SKU-1002", "the SKU to order one of")
	path := flag.String("journal", "orders.journal", "where keys are kept until their answer")
	flag.Parse()
	ctx := context.Background()
	j := &Journal{Path: *path}
	c, err := New(*url, *apiKey, j, nil)
	if err != nil {
		log.Fatal(err)
	}
	resumed, err := Resume(ctx, c, j)
	for _, o := range resumed {
		fmt.Printf("resumed order %s (replayed: %t)\n", o.Value.OrderID, o.Replayed)
	}
	if err != nil {
		log.Fatal(err)
	}
	o, err := Place(ctx, c, j, []client.Item{{SKU: *sku, Quantity: 1}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("order %s, %s\n", o.Value.OrderID, o.Value.Status)
}

// New returns a client whose every write is journalled before it is sent; transport may be
// nil.
func New(url, apiKey string, j *Journal, transport http.RoundTripper) (*client.Client, error) {
	return client.New(client.Config{BaseURL: url, APIKey: apiKey, Transport: transport, BeforeSend: j.Save})
}

// Place orders items and marks its journal entry answered once the answer is final (an order,
// or a refusal such as out_of_stock). A call without a final answer stays in the journal.
func Place(ctx context.Context, c *client.Client, j *Journal, items []client.Item) (client.Result[client.Order], error) {
	res, err := c.CreateOrder(ctx, items)
	return res, j.settle(res.Key, err)
}

// Resume sends again every journalled order without a final answer, under its own key and
// with its own body.
func Resume(ctx context.Context, c *client.Client, j *Journal) ([]client.Result[client.Order], error) {
	pending, err := j.Pending()
	if err != nil {
		return nil, err
	}
	var out []client.Result[client.Order]
	for _, w := range pending {
		resp, err := c.Do(ctx, client.Request{Method: w.Method, Path: w.Path, Body: w.Body, Keyed: true}, client.WithKey(w.Key))
		if err := j.settle(w.Key, err); err != nil {
			return out, err
		}
		res := client.Result[client.Order]{Meta: resp.Meta}
		if err := json.Unmarshal(resp.Body, &res.Value); err != nil {
			return out, err
		}
		out = append(out, res)
	}
	return out, nil
}

// Journal is an append-only file of writes sent and writes answered, one JSON line each. A
// real program keeps it in its own database, in the transaction that decided to order.
type Journal struct {
	Path string
	mu   sync.Mutex
}

// line is one record of the journal: a write about to be sent, or the key of one answered.
type line struct {
	Key      string          `json:"key"`
	Method   string          `json:"method,omitempty"`
	Path     string          `json:"path,omitempty"`
	Body     json.RawMessage `json:"body,omitempty"`
	Answered bool            `json:"answered,omitempty"`
}

// Save records w before its first attempt, and syncs it to disk: the BeforeSend hook.
func (j *Journal) Save(_ context.Context, w client.Write) error {
	return j.append(line{Key: w.Key, Method: w.Method, Path: w.Path, Body: w.Body})
}

// settle marks key answered unless err says the write may still be unanswered.
func (j *Journal) settle(key string, err error) error {
	if errors.Is(err, client.ErrIndefinite) || key == "" {
		return err
	}
	if jerr := j.append(line{Key: key, Answered: true}); jerr != nil {
		return errors.Join(err, jerr)
	}
	return err
}

func (j *Journal) append(l line) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	f, err := os.OpenFile(j.Path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	b, _ := json.Marshal(l)
	_, err = f.Write(append(b, '\n'))
	return errors.Join(err, f.Sync(), f.Close())
}

// Pending returns the writes saved and not answered, in the order they were saved.
func (j *Journal) Pending() ([]client.Write, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	f, err := os.Open(j.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	defer f.Close()
	var order []string
	saved := map[string]client.Write{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("journal %s: %w", j.Path, err)
		}
		if l.Answered {
			delete(saved, l.Key)
			continue
		}
		order = append(order, l.Key)
		saved[l.Key] = client.Write{Key: l.Key, Method: l.Method, Path: l.Path, Body: l.Body}
	}
	var out []client.Write
	for _, k := range order {
		if w, ok := saved[k]; ok {
			out = append(out, w)
		}
	}
	return out, sc.Err()
}
