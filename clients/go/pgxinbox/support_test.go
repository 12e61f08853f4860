package pgxinbox_test

// What the suite shares: the cases of clients/testing/cases.json, signing
// as Stripe and Slack do, the count of order rows (as the owner, on a
// fresh connection each time: the restart tests cut every connection),
// the server restart, and the worker child process.

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v4"

	"pg_webhook_inbox/clients/go/pgxinbox"
)

type expect struct {
	HTTP        int             `json:"http"`
	Status      string          `json:"status"`
	Work        int             `json:"work"`
	Reason      string          `json:"reason"`
	Result      json.RawMessage `json:"result"`
	Body        *string         `json:"body"`
	ContentType string          `json:"content_type"`
	Keys        []string        `json:"keys"`
}

type testCase struct {
	Name     string  `json:"name"`
	Provider string  `json:"provider"`
	Event    string  `json:"event"`
	RawBody  *string `json:"raw_body"`
	BodySize int     `json:"body_bytes"`
	Sign     string  `json:"sign"`
	Fail     bool    `json:"fail"`
	Expect   json.RawMessage
}

var testing_ = filepath.Join("..", "..", "testing")

func loadCases(t *testing.T) []testCase {
	b, err := os.ReadFile(filepath.Join(testing_, "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct{ Cases []testCase }
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f.Cases
}

func (c testCase) expected(t *testing.T, run string) expect {
	var e expect
	if err := json.Unmarshal([]byte(strings.ReplaceAll(string(c.Expect), "{run}", run)), &e); err != nil {
		t.Fatal(err)
	}
	return e
}

func newRun() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func stripeEvent(eventID, run string) []byte {
	b, _ := json.Marshal(map[string]any{"id": eventID, "object": "event", "type": "invoice.paid",
		"data": map[string]any{"object": map[string]any{"id": "in_" + run}}})
	return b
}

func sign(secret, payload string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(payload))
	return hex.EncodeToString(m.Sum(nil))
}

func stripeHeaders(body []byte, secret string) http.Header {
	t := strconv.FormatInt(time.Now().Unix(), 10)
	return http.Header{"Content-Type": {"application/json"}, "Stripe-Signature": {"t=" + t + ",v1=" + sign(secret, t+"."+string(body))}}
}

const stripeSecret = "whsec_clients_suite"

// delivery is a case's provider, headers and body.
func (c testCase) delivery(run string) (string, http.Header, []byte) {
	var body []byte
	if c.BodySize > 0 {
		body = bytes.Repeat([]byte("x"), c.BodySize)
	} else if c.RawBody != nil {
		body = []byte(strings.ReplaceAll(*c.RawBody, "{run}", run))
	} else {
		body = stripeEvent(strings.ReplaceAll(c.Event, "{run}", run), run)
	}
	var h http.Header
	switch c.Sign {
	case "stripe":
		h = stripeHeaders(body, stripeSecret)
	case "forged":
		h = stripeHeaders(body, "whsec_someone_else")
	case "slack":
		t := strconv.FormatInt(time.Now().Unix(), 10)
		h = http.Header{"Content-Type": {"application/json"}, "X-Slack-Request-Timestamp": {t},
			"X-Slack-Signature": {"v0=" + sign("slack_clients_suite", "v0:"+t+":"+string(body))}}
	default:
		h = http.Header{"Content-Type": {"application/json"}}
	}
	return c.Provider, h, body
}

func admin(t *testing.T, q string, args ...any) pgx.Row {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), os.Getenv("ADMIN_URL"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn.QueryRow(context.Background(), q, args...)
}

func orders(t *testing.T, pattern, handler string) int {
	t.Helper()
	var n int
	if err := admin(t, "SELECT count(*) FROM orders WHERE event_id LIKE $1 AND handler = $2", "%"+pattern+"%", handler).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func restartServer(t *testing.T) {
	out, err := exec.Command(filepath.Join(testing_, "restart-server"), "0.3").CombinedOutput()
	if err != nil {
		t.Fatalf("restart-server: %v: %s", err, out)
	}
}

// TestMain runs the worker of the kill and SIGTERM tests when this binary
// is started as one (PGWI_WORKER_CHILD=MS_PER_EVENT,LEASE).
func TestMain(m *testing.M) {
	if spec := os.Getenv("PGWI_WORKER_CHILD"); spec != "" {
		parts := strings.SplitN(spec, ",", 2)
		ms, _ := strconv.Atoi(parts[0])
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		w := &pgxinbox.Worker{ConnString: os.Getenv("DATABASE_URL"), Batch: 5, Lease: parts[1],
			Work: func(ctx context.Context, tx pgx.Tx, e pgxinbox.Event) error {
				if _, err := tx.Exec(ctx, insertWorker, e.Provider, e.EventID, e.EventType); err != nil {
					return err
				}
				fmt.Printf("working %s\n", e.EventID)
				time.Sleep(time.Duration(ms) * time.Millisecond)
				return nil
			}}
		if err := w.Run(ctx); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const insertWorker = "INSERT INTO orders (provider, event_id, event_type, handler) VALUES ($1, $2, $3, 'worker')"
