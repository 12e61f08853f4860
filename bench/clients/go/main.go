// A handler through the Go package against the same handler calling SQL by
// hand: deliveries a second, one after another on a pool of one, the two
// taking turns, each going first in every other round. Prints one JSON line.
// `go run . DELIVERIES ROUNDS`.
package main

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"

	webhookinbox "pg_webhook_inbox/clients/go"
	"pg_webhook_inbox/clients/go/pgxinbox"
)

const insert = "INSERT INTO orders (provider, event_id, event_type, handler) VALUES ('stripe', $1, $2, 'bench')"
const receive = "SELECT id::text, claimed, status::text, http_status, reason, response, event_id, event_type " +
	"FROM webhook_receive($1::text, $2::text::jsonb, $3::bytea, url => $4::text, complete_on_commit => true)"

type delivery struct {
	header http.Header
	body   []byte
}

func signed(n int) []delivery {
	out := make([]delivery, n)
	for i := range out {
		id := make([]byte, 16)
		_, _ = rand.Read(id)
		body, _ := json.Marshal(map[string]any{"id": "evt_" + hex.EncodeToString(id), "object": "event", "type": "invoice.paid",
			"data": map[string]any{"object": map[string]any{"id": "in_1"}}})
		t := strconv.FormatInt(time.Now().Unix(), 10)
		m := hmac.New(sha256.New, []byte("whsec_clients_suite"))
		m.Write([]byte(t + "." + string(body)))
		out[i] = delivery{http.Header{"Content-Type": {"application/json"},
			"Stripe-Signature": {"t=" + t + ",v1=" + hex.EncodeToString(m.Sum(nil))}}, body}
	}
	return out
}

// byHand is what a careful handler writes without the package.
func byHand(ctx context.Context, pool *pgxpool.Pool, d delivery) (int, error) {
	status := 0
	err := pool.BeginFunc(ctx, func(tx pgx.Tx) error {
		var id, st string
		var claimed bool
		var httpStatus int32
		var reason, response, eventID, eventType *string
		if err := tx.QueryRow(ctx, receive, "stripe", webhookinbox.HeadersJSON(d.header), d.body, nil).Scan(
			&id, &claimed, &st, &httpStatus, &reason, &response, &eventID, &eventType); err != nil {
			return err
		}
		status = int(httpStatus)
		if response != nil || !claimed {
			return nil
		}
		if _, err := tx.Exec(ctx, "SAVEPOINT work"); err != nil {
			return err
		}
		if _, werr := tx.Exec(ctx, insert, *eventID, eventType); werr != nil {
			status = 500
			if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT work"); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "SELECT webhook_fail($1::uuid, $2)", id, werr.Error())
			return err
		}
		_, err := tx.Exec(ctx, "RELEASE SAVEPOINT work")
		return err
	})
	return status, err
}

func median(xs []float64) float64 {
	sort.Float64s(xs)
	return xs[len(xs)/2]
}

func main() {
	n, _ := strconv.Atoi(os.Args[1])
	rounds, _ := strconv.Atoi(os.Args[2])
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.ConnectConfig(ctx, cfg)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	handler := pgxinbox.NewHandler(pool)
	work := func(ctx context.Context, tx pgx.Tx, d webhookinbox.Delivery) (any, error) {
		_, err := tx.Exec(ctx, insert, *d.EventID, d.EventType)
		return nil, err
	}
	rates := map[string][]float64{}
	for r := 0; r < rounds; r++ {
		order := []string{"package", "by_hand"}
		if r%2 == 1 {
			order = []string{"by_hand", "package"}
		}
		for _, name := range order {
			batch := signed(n)
			started := time.Now()
			for _, d := range batch {
				var status int
				if name == "package" {
					status = handler.Handle(ctx, "stripe", d.header, d.body, "", work).Status
				} else if status, err = byHand(ctx, pool, d); err != nil {
					panic(err)
				}
				if status != 200 {
					panic(fmt.Sprintf("answered %d", status))
				}
			}
			rates[name] = append(rates[name], float64(n)/time.Since(started).Seconds())
		}
	}
	p, h := median(rates["package"]), median(rates["by_hand"])
	out, _ := json.Marshal(map[string]any{"language": "go (pgx Handler)", "package": int(p), "by_hand": int(h),
		"ratio": float64(int(p/h*1000)) / 1000})
	fmt.Println(string(out))
}
