// The Go package's net/http handler mounted as chi, echo and gin users
// mount it (the Go README's lines), against the suites' server: a genuine
// Stripe delivery is claimed and its work done once, the redelivery is a
// duplicate, a forgery is refused, and the provider comes from each
// router's own path parameter syntax. Built in GOPATH mode against
// Debian's chi, echo and gin (the package's own tests need none of them).
package routers

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi"
	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"
	"github.com/labstack/echo"

	webhookinbox "pg_webhook_inbox/clients/go"
	"pg_webhook_inbox/clients/go/pgxinbox"
)

const secret = "whsec_clients_suite"

func signed(t *testing.T, eventID string, key string) (http.Header, []byte) {
	body, _ := json.Marshal(map[string]any{"id": eventID, "object": "event", "type": "invoice.paid",
		"data": map[string]any{"object": map[string]any{"id": "in_1"}}})
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte(ts + "." + string(body)))
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Stripe-Signature", "t="+ts+",v1="+hex.EncodeToString(mac.Sum(nil)))
	return h, body
}

func post(t *testing.T, url string, h http.Header, body []byte) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header = h
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	var answer map[string]any
	if err := json.Unmarshal(b, &answer); err != nil {
		t.Fatalf("%d %q", r.StatusCode, b)
	}
	return r.StatusCode, answer
}

func TestTheHandlerUnderChiEchoAndGin(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.Connect(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	handler := pgxinbox.NewHandler(pool)
	gin.SetMode(gin.ReleaseMode)
	routers := map[string]func(http.Handler) http.Handler{
		"chi": func(h http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Method("POST", "/webhooks/{provider}", h)
			return r
		},
		"echo": func(h http.Handler) http.Handler {
			e := echo.New()
			e.POST("/webhooks/:provider", echo.WrapHandler(h))
			return e
		},
		"gin": func(h http.Handler) http.Handler {
			r := gin.New()
			r.POST("/webhooks/:provider", gin.WrapH(h))
			return r
		},
	}
	for name, mount := range routers {
		t.Run(name, func(t *testing.T) {
			work := func(ctx context.Context, tx pgx.Tx, d webhookinbox.Delivery) (any, error) {
				return nil, pgxinbox.Exec(ctx, tx, "INSERT INTO orders (provider, event_id, event_type, handler) VALUES ('stripe', $1, $2, $3)",
					*d.EventID, d.EventType, name)
			}
			srv := httptest.NewServer(mount(handler.HTTP(work, "")))
			defer srv.Close()
			run := make([]byte, 6)
			_, _ = rand.Read(run)
			eventID := fmt.Sprintf("evt_%x_%s", run, name)
			h, body := signed(t, eventID, secret)
			for i, want := range []string{"claimed", "duplicate"} {
				status, answer := post(t, srv.URL+"/webhooks/stripe", h, body)
				if status != 200 || answer["status"] != want {
					t.Fatalf("delivery %d: %d %v, want 200 %s", i+1, status, answer, want)
				}
			}
			var n int
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM orders WHERE event_id = $1", eventID).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 1 {
				t.Fatalf("%d orders for %s, want 1", n, eventID)
			}
			h, body = signed(t, eventID+"_forged", "whsec_someone_else")
			if status, answer := post(t, srv.URL+"/webhooks/stripe", h, body); status != 401 || answer["status"] != "rejected" {
				t.Fatalf("forgery: %d %v", status, answer)
			}
			if status, answer := post(t, srv.URL+"/webhooks/nobody", h, body); status != 404 || answer["status"] != "unknown_provider" {
				t.Fatalf("the provider from the path: %d %v", status, answer)
			}
		})
	}
}
