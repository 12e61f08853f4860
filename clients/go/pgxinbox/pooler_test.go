package pgxinbox_test

// Through PgBouncer in transaction mode (four server connections shared by
// every client), as on Supabase's or Neon's pooled connection string:
// providers delivering to the handler on a pgxpool set up as the README
// says (statement_cache_mode=describe), claimed and queued, workers (from
// a connection string that says nothing of statements) draining the inbox,
// the pooler restarted twice under them. Each delivery answered 2xx is
// done exactly once; nothing fails on a statement the pooler moved; the
// workers are still running. And a worker keeps running through any error,
// not only an outage.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"

	webhookinbox "pg_webhook_inbox/clients/go"
	"pg_webhook_inbox/clients/go/pgxinbox"
)

const insertAs = "INSERT INTO orders (provider, event_id, event_type, handler) VALUES ($1, $2, $3, $4)"

func restartPooler(t *testing.T, down string) {
	out, err := exec.Command(filepath.Join(testing_, "pooler"), "restart", os.Getenv("POOLER_DIR"), down).CombinedOutput()
	if err != nil {
		t.Fatalf("pooler restart: %v: %s", err, out)
	}
}

func doneOnce(t *testing.T, run string) map[string]int {
	conn, err := pgx.Connect(context.Background(), os.Getenv("ADMIN_URL"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), "SELECT event_id, count(*)::int FROM orders WHERE event_id LIKE $1 GROUP BY 1", "evt_"+run+"_%")
	if err != nil {
		t.Fatal(err)
	}
	done := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		done[id] = n
	}
	return done
}

func withParam(url, param string) string {
	if strings.Contains(url, "?") {
		return url + "&" + param
	}
	return url + "?" + param
}

func TestHandlerAndWorkersThroughATransactionPooler(t *testing.T) {
	const senders, each = 6, 30
	run := newRun()
	cfg, err := pgxpool.ParseConfig(withParam(os.Getenv("POOLER_URL"), "statement_cache_mode=describe"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 6
	pool, err := pgxpool.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	h := pgxinbox.NewHandler(pool)
	var workers []*pgxinbox.Worker
	var alive atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		// A batch a restart took the connection of is leased until its
		// lease runs out: a short one, so that the test does not wait.
		w := &pgxinbox.Worker{ConnString: os.Getenv("POOLER_URL"), NoListen: true, Poll: 100 * time.Millisecond, Batch: 5,
			Lease:   "5 seconds",
			Backoff: pgxinbox.Backoff{First: 100 * time.Millisecond, Last: 500 * time.Millisecond},
			Logf:    func(string, ...any) {},
			Work: func(ctx context.Context, tx pgx.Tx, e pgxinbox.Event) error {
				_, err := tx.Exec(ctx, insertAs, e.Provider, e.EventID, e.EventType, "pooled_worker")
				return err
			}}
		workers = append(workers, w)
		alive.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer alive.Add(-1)
			_ = w.Run(context.Background())
		}()
	}
	stopWorkers := func() {
		for _, w := range workers {
			w.Stop()
		}
		wg.Wait()
	}
	defer stopWorkers()
	var mu sync.Mutex
	answers := map[int]int{}
	var acknowledged []string
	var sending sync.WaitGroup
	failures := make(chan string, senders)
	for s := 0; s < senders; s++ {
		sending.Add(1)
		go func(s int) {
			defer sending.Done()
			for i := 0; i < each; i++ {
				eventID := fmt.Sprintf("evt_%s_%d_%d", run, s, i)
				name := "stripe_inbox"
				if i%2 == 1 {
					name = "stripe"
				}
				deadline := time.Now().Add(60 * time.Second)
				for {
					if time.Now().After(deadline) {
						failures <- eventID + " never acknowledged"
						return
					}
					body := stripeEvent(eventID, run)
					a := h.Handle(context.Background(), name, stripeHeaders(body, stripeSecret), body, "",
						func(ctx context.Context, tx pgx.Tx, d webhookinbox.Delivery) (any, error) {
							return nil, pgxinbox.Exec(ctx, tx, insertAs, name, *d.EventID, d.EventType, "pooled")
						})
					mu.Lock()
					answers[a.Status]++
					mu.Unlock()
					if a.Status >= 200 && a.Status < 300 {
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
				mu.Lock()
				acknowledged = append(acknowledged, eventID)
				mu.Unlock()
			}
		}(s)
	}
	after := func(n int) {
		deadline := time.Now().Add(60 * time.Second)
		for {
			mu.Lock()
			got := len(acknowledged)
			mu.Unlock()
			if got >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d deliveries acknowledged", got)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	after(40)
	restartPooler(t, "0")
	after(100)
	restartPooler(t, "0.3")
	sending.Wait()
	close(failures)
	for f := range failures {
		t.Fatal(f)
	}
	deadline := time.Now().Add(60 * time.Second)
	for len(doneOnce(t, run)) < senders*each && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if alive.Load() != 2 {
		t.Fatalf("a worker ended: %d running", alive.Load())
	}
	stopWorkers()
	done := doneOnce(t, run)
	t.Logf("through the pooler: answers %v", answers)
	var ids []string
	for id, n := range done {
		if n != 1 {
			t.Errorf("%s done %d times", id, n)
		}
		ids = append(ids, id)
	}
	sort.Strings(ids)
	sort.Strings(acknowledged)
	if fmt.Sprint(ids) != fmt.Sprint(acknowledged) || len(ids) != senders*each {
		t.Fatalf("%d done, %d acknowledged", len(ids), len(acknowledged))
	}
	for status := range answers {
		if status != 200 && status != 503 {
			t.Fatalf("answers %v", answers)
		}
	}
	for _, w := range workers {
		if err := w.LastError(); err != nil && !webhookinbox.IsOutage(err) {
			t.Fatalf("a worker failed on more than an outage: %v", err)
		}
	}
}

func TestAWorkerRunsThroughAnyErrorUntilStopped(t *testing.T) {
	run := newRun()
	ctx := context.Background()
	execute := func(grant bool) {
		conn, err := pgx.Connect(ctx, os.Getenv("ADMIN_URL"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		rows, err := conn.Query(ctx, "SELECT oid::regprocedure::text FROM pg_proc WHERE proname = 'webhook_next'")
		if err != nil {
			t.Fatal(err)
		}
		var fs []string
		for rows.Next() {
			var f string
			_ = rows.Scan(&f)
			fs = append(fs, f)
		}
		for _, f := range fs {
			q := "REVOKE EXECUTE ON FUNCTION " + f + " FROM clients_app"
			if grant {
				q = "GRANT EXECUTE ON FUNCTION " + f + " TO clients_app"
			}
			if _, err := conn.Exec(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
	}
	var logged []string
	var logMu sync.Mutex
	var seen atomic.Int32
	w := &pgxinbox.Worker{ConnString: os.Getenv("DATABASE_URL"), NoListen: true, Poll: 50 * time.Millisecond, Work: plain,
		Backoff: pgxinbox.Backoff{First: 50 * time.Millisecond, Last: 200 * time.Millisecond},
		Logf: func(format string, args ...any) {
			logMu.Lock()
			logged = append(logged, fmt.Sprintf(format, args...))
			logMu.Unlock()
		},
		OnError: func(error) { seen.Add(1); panic("the application's own callback failed too") }}
	execute(false)
	ended := make(chan error, 1)
	go func() { ended <- w.Run(ctx) }()
	func() {
		defer execute(true)
		deadline := time.Now().Add(20 * time.Second)
		for w.ConsecutiveErrors() < 3 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if w.ConsecutiveErrors() < 3 {
			t.Fatalf("errors in a row: %d (%v)", w.ConsecutiveErrors(), w.LastError())
		}
		if webhookinbox.SQLState(w.LastError()) != "42501" {
			t.Fatalf("last error: %v", w.LastError())
		}
		select {
		case err := <-ended:
			t.Fatalf("the worker ended: %v", err)
		default:
		}
	}()
	queue(t, run, 3)
	waitFor(t, run, 3, 30*time.Second)
	w.Stop()
	if err := <-ended; err != nil {
		t.Fatal(err)
	}
	if w.ConsecutiveErrors() != 0 || w.Errors() < 3 || seen.Load() < 3 {
		t.Fatalf("counted: %d in a row, %d in all, %d seen", w.ConsecutiveErrors(), w.Errors(), seen.Load())
	}
	logMu.Lock()
	defer logMu.Unlock()
	if !strings.Contains(strings.Join(logged, "\n"), "an iteration failed") {
		t.Fatalf("logged: %v", logged)
	}
}
