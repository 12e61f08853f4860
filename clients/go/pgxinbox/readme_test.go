package pgxinbox_test

// The README's ten-line handler: routes below is the README's block to the
// byte (the test checks), sent a delivery through a real HTTP server.

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"

	webhookinbox "pg_webhook_inbox/clients/go"
	"pg_webhook_inbox/clients/go/pgxinbox"
)

func routes(pool *pgxpool.Pool) http.Handler {
	paid := func(ctx context.Context, tx pgx.Tx, d webhookinbox.Delivery) (any, error) {
		_, err := tx.Exec(ctx, "INSERT INTO invoices_paid (event_id) VALUES ($1)", *d.EventID)
		return nil, err // an error: recorded, answered 500, retried
	}
	mux := http.NewServeMux()
	mux.Handle("/webhooks/", pgxinbox.NewHandler(pool).HTTP(paid, "")) // the provider: the last path segment
	return mux
}

func TestReadmeHandlerIsTheReadmesAndDoesADeliveryOnce(t *testing.T) {
	readme, _ := os.ReadFile(filepath.Join("..", "README.md"))
	self, _ := os.ReadFile("readme_test.go")
	start := bytes.Index(self, []byte("func routes("))
	end := bytes.Index(self[start:], []byte("\n}\n")) + start + 3
	if !bytes.Contains(readme, self[start:end]) {
		t.Fatal("routes is not the README's block")
	}
	pool, err := pgxpool.Connect(context.Background(), os.Getenv("DATABASE_URL"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	srv := httptest.NewServer(routes(pool))
	defer srv.Close()
	send := func(body []byte, secret string) (int, map[string]any) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/webhooks/stripe", bytes.NewReader(body))
		req.Header = stripeHeaders(body, secret)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(r.Body).Decode(&m)
		return r.StatusCode, m
	}
	run := newRun()
	event := "evt_" + run + "_readme"
	body := stripeEvent(event, run)
	if s, a := send(body, stripeSecret); s != 200 || a["status"] != "claimed" {
		t.Fatal(s, a)
	}
	if s, a := send(body, stripeSecret); s != 200 || a["status"] != "duplicate" {
		t.Fatal(s, a)
	}
	if s, a := send(body, "whsec_someone_else"); s != 401 || a["reason"] != "bad_signature" {
		t.Fatal(s, a)
	}
	var n int
	if err := admin(t, "SELECT count(*) FROM invoices_paid WHERE event_id = $1", event).Scan(&n); err != nil || n != 1 {
		t.Fatal(n, err)
	}
}
