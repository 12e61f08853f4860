package pgxinbox_test

// The table of answers (clients/testing/cases.json) through net/http on
// pgx and on database/sql (pgx's stdlib), and what surrounds it: a live
// attempt elsewhere, a database restarted in the middle of the work, one
// that stays away, a provider nobody registered.

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"
	_ "github.com/jackc/pgx/v4/stdlib"

	webhookinbox "pg_webhook_inbox/clients/go"
	"pg_webhook_inbox/clients/go/pgxinbox"
)

const away = "postgresql://clients_app@127.0.0.1:1/nowhere?connect_timeout=1"
const insertOrder = "INSERT INTO orders (provider, event_id, event_type, handler) VALUES ('stripe', $1, $2, $3)"

// trouble: what goes wrong in the work, per event id.
type trouble struct {
	sync.Mutex
	fail, restart map[string]bool
}

func newTrouble() *trouble { return &trouble{fail: map[string]bool{}, restart: map[string]bool{}} }

func (tr *trouble) before(t *testing.T, id string) {
	tr.Lock()
	r := tr.restart[id]
	delete(tr.restart, id)
	tr.Unlock()
	if r {
		restartServer(t)
	}
}

func (tr *trouble) after(id string) error {
	tr.Lock()
	defer tr.Unlock()
	if tr.fail[id] {
		return fmt.Errorf("%s fails", id)
	}
	return nil
}

type sent struct {
	status      int
	contentType string
	body        string
	header      http.Header
}

type adapter struct {
	name    string
	trouble *trouble
	server  *httptest.Server
	close   func()
}

func (a *adapter) send(t *testing.T, provider string, h http.Header, body []byte) sent {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, a.server.URL+"/webhooks/"+provider, bytes.NewReader(body))
	req.Header = h
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return sent{r.StatusCode, strings.Split(r.Header.Get("Content-Type"), ";")[0], string(b), r.Header}
}

func work[T any](t *testing.T, name string, tr *trouble, exec func(context.Context, T, string, ...any) error) webhookinbox.Work[T] {
	return func(ctx context.Context, tx T, d webhookinbox.Delivery) (any, error) {
		tr.before(t, *d.EventID)
		if err := exec(ctx, tx, insertOrder, *d.EventID, d.EventType, name); err != nil {
			return nil, err
		}
		if err := tr.after(*d.EventID); err != nil {
			return nil, err
		}
		return map[string]string{"order": *d.EventID}, nil
	}
}

func pgxAdapter(t *testing.T, url string, retry float64) *adapter {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	cfg.LazyConnect = true
	pool, err := pgxpool.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr := newTrouble()
	h := pgxinbox.NewHandler(pool)
	h.RetrySeconds = retry
	srv := httptest.NewServer(h.HTTP(work[pgx.Tx](t, "pgx", tr, pgxinbox.Exec), ""))
	return &adapter{"pgx", tr, srv, func() { srv.Close(); pool.Close() }}
}

func sqlAdapter(t *testing.T, url string, retry float64) *adapter {
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(4)
	tr := newTrouble()
	h := &webhookinbox.Handler[*sql.Tx]{Driver: webhookinbox.SQLDB(db), RetrySeconds: retry}
	exec := func(ctx context.Context, tx *sql.Tx, q string, args ...any) error {
		_, err := tx.ExecContext(ctx, q, args...)
		return err
	}
	srv := httptest.NewServer(h.HTTP(work[*sql.Tx](t, "database/sql", tr, exec), ""))
	return &adapter{"database/sql", tr, srv, func() { srv.Close(); db.Close() }}
}

var adapters = []func(*testing.T, string, float64) *adapter{pgxAdapter, sqlAdapter}

func each(t *testing.T, url string, retry float64, f func(*testing.T, *adapter)) {
	for _, make := range adapters {
		a := make(t, url, retry)
		t.Run(a.name, func(t *testing.T) { f(t, a) })
		a.close()
	}
}

func answerOf(t *testing.T, s sent) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s.body), &m); err != nil {
		t.Fatalf("%v: %q", err, s.body)
	}
	return m
}

func TestEveryAnswerOfTheTable(t *testing.T) {
	cases := loadCases(t)
	each(t, os.Getenv("DATABASE_URL"), 8, func(t *testing.T, a *adapter) {
		run := newRun()
		for _, c := range cases {
			if c.Fail {
				a.trouble.fail[strings.ReplaceAll(c.Event, "{run}", run)] = true
			}
			before := orders(t, run, a.name)
			provider, h, body := c.delivery(run)
			s := a.send(t, provider, h, body)
			a.trouble.fail = map[string]bool{}
			want := c.expected(t, run)
			if s.status != want.HTTP {
				t.Fatalf("%s: %d %s", c.Name, s.status, s.body)
			}
			if n := orders(t, run, a.name) - before; n != want.Work {
				t.Fatalf("%s: %d order rows", c.Name, n)
			}
			if want.Body != nil {
				if s.body != *want.Body || s.contentType != want.ContentType {
					t.Fatalf("%s: %q (%s)", c.Name, s.body, s.contentType)
				}
				continue
			}
			got := answerOf(t, s)
			if got["status"] != want.Status || (want.Reason != "" && got["reason"] != want.Reason) {
				t.Fatalf("%s: %s", c.Name, s.body)
			}
			if want.Keys != nil && len(got) != len(want.Keys) {
				t.Fatalf("%s: keys of %s, not only %v", c.Name, s.body, want.Keys)
			}
			for _, k := range want.Keys {
				if _, ok := got[k]; !ok {
					t.Fatalf("%s: no %q in %s", c.Name, k, s.body)
				}
			}
			if want.Result != nil {
				r, _ := json.Marshal(got["result"])
				var a, b any
				_ = json.Unmarshal(r, &a)
				_ = json.Unmarshal(want.Result, &b)
				if fmt.Sprint(a) != fmt.Sprint(b) {
					t.Fatalf("%s: result %s", c.Name, r)
				}
			}
		}
	})
}

// A body sent without Content-Length (chunked) past the bound: 413.
func TestStreamedBodyPastTheBoundIsAnswered413(t *testing.T) {
	each(t, os.Getenv("DATABASE_URL"), 8, func(t *testing.T, a *adapter) {
		body := io.MultiReader(bytes.NewReader(make([]byte, webhookinbox.MaxBody)), strings.NewReader("x"))
		req, _ := http.NewRequest(http.MethodPost, a.server.URL+"/webhooks/stripe", io.NopCloser(body))
		req.ContentLength = -1
		req.Header.Set("Content-Type", "application/json")
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		got, _ := io.ReadAll(r.Body)
		if r.StatusCode != http.StatusRequestEntityTooLarge || strings.TrimSpace(string(got)) != `{"status":"too_large"}` {
			t.Fatalf("%d %s", r.StatusCode, got)
		}
	})
}

func TestLiveAttemptElsewhereIsAnswered409UntilItEnds(t *testing.T) {
	each(t, os.Getenv("DATABASE_URL"), 8, func(t *testing.T, a *adapter) {
		ctx := context.Background()
		run := newRun()
		body := stripeEvent("evt_"+run+"_live", run)
		holder, err := pgx.Connect(ctx, os.Getenv("DATABASE_URL"))
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Close(ctx)
		tx, _ := holder.Begin(ctx)
		held, err := webhookinbox.Receive(ctx, pgxinbox.Tx, tx, "stripe", stripeHeaders(body, stripeSecret), body,
			webhookinbox.Options{CompleteOnCommit: true})
		if err != nil || !held.Claimed {
			t.Fatalf("%v %+v", err, held)
		}
		s := a.send(t, "stripe", stripeHeaders(body, stripeSecret), body)
		if s.status != 409 || answerOf(t, s)["status"] != "in_progress" {
			t.Fatalf("%d %s", s.status, s.body)
		}
		_ = tx.Rollback(ctx) // the live attempt dies: its claim goes with it
		s = a.send(t, "stripe", stripeHeaders(body, stripeSecret), body)
		if s.status != 200 || answerOf(t, s)["status"] != "claimed" || orders(t, run, a.name) != 1 {
			t.Fatalf("%d %s", s.status, s.body)
		}
	})
}

func TestRestartInTheMiddleOfTheWorkIsRetriedAndDoneOnce(t *testing.T) {
	cases := loadCases(t)
	each(t, os.Getenv("DATABASE_URL"), 8, func(t *testing.T, a *adapter) {
		p, h, b := cases[0].delivery(newRun())
		a.send(t, p, h, b) // a pooled connection, as in a running service
		run := newRun()
		id := "evt_" + run + "_restart"
		body := stripeEvent(id, run)
		a.trouble.restart[id] = true
		s := a.send(t, "stripe", stripeHeaders(body, stripeSecret), body)
		if len(a.trouble.restart) != 0 {
			t.Fatal("the restart did not happen inside the work")
		}
		if s.status != 200 || answerOf(t, s)["status"] != "claimed" || orders(t, run, a.name) != 1 {
			t.Fatalf("%d %s, %d rows", s.status, s.body, orders(t, run, a.name))
		}
		s = a.send(t, "stripe", stripeHeaders(body, stripeSecret), body)
		if s.status != 200 || answerOf(t, s)["status"] != "duplicate" || orders(t, run, a.name) != 1 {
			t.Fatalf("%d %s", s.status, s.body)
		}
	})
}

func TestDatabaseThatStaysAwayIsAnswered503WithRetryAfter(t *testing.T) {
	for _, make := range adapters {
		a := lazy(t, make)
		t.Run(a.name, func(t *testing.T) {
			started := time.Now()
			body := stripeEvent("evt_away", "away")
			s := a.send(t, "stripe", stripeHeaders(body, stripeSecret), body)
			if s.status != 503 || s.body != `{"status":"unavailable"}` || s.header.Get("Retry-After") != "30" {
				t.Fatalf("%d %s %v", s.status, s.body, s.header)
			}
			if time.Since(started) > 6*time.Second {
				t.Fatalf("took %s", time.Since(started))
			}
		})
		a.close()
	}
}

// lazy: an adapter on a server that is not there (pgxpool connects lazily).
func lazy(t *testing.T, make func(*testing.T, string, float64) *adapter) *adapter {
	return make(t, away, 1)
}

func TestProviderNobodyRegisteredIsAnswered404(t *testing.T) {
	each(t, os.Getenv("DATABASE_URL"), 8, func(t *testing.T, a *adapter) {
		body := stripeEvent("evt_nobody", "nobody")
		s := a.send(t, "nobody", stripeHeaders(body, stripeSecret), body)
		if s.status != 404 || answerOf(t, s)["status"] != "unknown_provider" {
			t.Fatalf("%d %s", s.status, s.body)
		}
	})
}

// An error that is neither an outage nor an unknown provider is the
// application's (here a public URL webhook_receive refuses, 22023): heard
// by OnError, answered 500, nothing claimed, so the provider's retry finds
// the event new once the configuration is mended.
func TestMisconfigurationIsHeardAndAnswered500(t *testing.T) {
	pool, err := pgxpool.Connect(context.Background(), os.Getenv("DATABASE_URL"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var heard []error
	h := pgxinbox.NewHandler(pool)
	h.PublicURL = "ftp://hooks.example.com"
	h.OnError = func(err error) { heard = append(heard, err) }
	run := newRun()
	body := stripeEvent("evt_"+run+"_misconfigured", run)
	paid := func(ctx context.Context, tx pgx.Tx, d webhookinbox.Delivery) (any, error) { return nil, nil }
	a := h.Handle(context.Background(), "stripe", stripeHeaders(body, stripeSecret), body, "/webhooks/stripe", paid)
	if a.Status != 500 || len(heard) != 1 || webhookinbox.SQLState(heard[0]) != "22023" {
		t.Fatalf("%d %s %v", a.Status, a.Body, heard)
	}
	h.PublicURL = ""
	if a := h.Handle(context.Background(), "stripe", stripeHeaders(body, stripeSecret), body, "/webhooks/stripe", paid); a.Status != 200 || !strings.Contains(a.Body, `"claimed"`) {
		t.Fatalf("%d %s", a.Status, a.Body)
	}
}
