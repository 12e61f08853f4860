package pgxinbox

// The inbox's worker loop on pgx: lease a batch with webhook_next, work
// each event in a savepoint, finish the batch with one
// webhook_complete_batch in the same transaction as its work, so each
// event's work commits exactly once.
//
//   - A failing event is recorded with webhook_fail (retried after the
//     backoff) and undoes only its own work.
//   - A lease that ran out and was taken over refuses the batch (55006): its
//     work rolls back, and the events are finished one transaction each so
//     the others still commit.
//   - Stop (or the context's end, or SIGTERM with signal.NotifyContext): the
//     event in hand is finished, the rest of the batch handed back at once.
//   - Anything else that goes wrong in an iteration (the database away, any
//     database error, a bug): logged (Logf, log.Printf by default), counted
//     (Errors, ConsecutiveErrors, LastError), passed to OnError, and the loop
//     goes on after a wait of 0.5 s doubling to 30 s, each drawn from its
//     upper half so that workers one restart dropped do not all return at
//     once. Run never returns on its own, only by Stop or its context's end.
//     What a lost connection held rolled back with it; its leases run out
//     and are taken again.
//   - Idle: LISTEN webhook_inbox wakes it as soon as something is queued
//     (needs a direct or session-pooled connection; NoListen polls).
//   - Connections: from ConnString or the application's Connect. Those from
//     ConnString describe each statement rather than prepare it (pgx's
//     statement_cache_mode=describe, unless the string says otherwise), so
//     behind a transaction pooler (PgBouncer in transaction mode, Supavisor's
//     or Neon's pooled endpoint) the worker works with NoListen.

import (
	"context"
	"encoding/json"
	"errors"
	"log"
	"math/rand"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgconn/stmtcache"
	"github.com/jackc/pgx/v4"

	webhookinbox "pg_webhook_inbox/clients/go"
)

const (
	nextSQL = "SELECT id::text, provider, event_id, event_type, payload::text, attempts, consumer, traceparent, origin " +
		"FROM webhook_next($1::int, $2::text, provider => $3::text, lease => $4::interval)"
	completeBatchSQL = "SELECT webhook_complete_batch($1::uuid[])"
	handBackSQL      = "SELECT webhook_fail($1::uuid, 'worker shut down', retry_in => '0 s')"
	outboundKeySQL   = "SELECT webhook_outbound_key($1::uuid, $2::text)"
	takenOver        = "55006"
)

// Event is one leased inbox event (a row of webhook_next); ID is the lease.
type Event struct {
	ID          string
	Provider    string
	EventID     string
	EventType   *string
	Payload     json.RawMessage
	Attempts    int32
	Consumer    string
	Traceparent *string
	Origin      string
}

// Backoff is the reconnect waits: doubling from First to Last, each drawn
// from the upper half of its step, back to First once connected.
type Backoff struct {
	First, Last, step time.Duration
}

func (b *Backoff) Connected() { b.step = b.First }

func (b *Backoff) Next() time.Duration {
	if b.step == 0 {
		b.step = b.First
	}
	wait := b.step/2 + time.Duration(rand.Int63n(int64(b.step/2)+1))
	if b.step *= 2; b.step > b.Last {
		b.step = b.Last
	}
	return wait
}

// Worker runs Work for every event of Consumer (optionally one Provider's).
type Worker struct {
	ConnString string
	// Connect, when set, opens the worker's connections instead (and the
	// listener's): the application's own settings.
	Connect func(ctx context.Context) (*pgx.Conn, error)
	// Work runs in the batch's transaction: its writes on tx commit with
	// the event's completion; an error records a failure.
	Work     func(ctx context.Context, tx pgx.Tx, e Event) error
	Consumer string
	Provider string
	Batch    int
	Lease    string
	Poll     time.Duration
	NoListen bool
	OnError  func(error)
	// Logf writes a failed iteration: log.Printf by default.
	Logf    func(format string, args ...any)
	Backoff Backoff

	stopping    atomic.Bool
	errors      atomic.Int64
	consecutive atomic.Int64
	lastMu      sync.Mutex
	lastError   error
}

// Errors is how many iterations failed since the worker started; a worker
// that keeps failing shows here and in the log, not as a process gone.
func (w *Worker) Errors() int64 { return w.errors.Load() }

// ConsecutiveErrors is how many iterations in a row failed (0 once one
// works).
func (w *Worker) ConsecutiveErrors() int64 { return w.consecutive.Load() }

// LastError is the last iteration's failure, nil before the first.
func (w *Worker) LastError() error {
	w.lastMu.Lock()
	defer w.lastMu.Unlock()
	return w.lastError
}

// Stop asks the worker to finish the event in hand and return.
func (w *Worker) Stop() { w.stopping.Store(true) }

func (w *Worker) defaults() {
	if w.Consumer == "" {
		w.Consumer = "default"
	}
	if w.Batch == 0 {
		w.Batch = 10
	}
	if w.Lease == "" {
		w.Lease = "1 minute"
	}
	if w.Poll == 0 {
		w.Poll = time.Second
	}
	if w.Backoff.First == 0 {
		w.Backoff = Backoff{First: 500 * time.Millisecond, Last: 30 * time.Second}
	}
	if w.OnError == nil {
		w.OnError = func(error) {}
	}
	if w.Logf == nil {
		w.Logf = log.Printf
	}
}

// Run works until Stop or ctx's end, and returns nil then: nothing else
// ends it.
func (w *Worker) Run(ctx context.Context) error {
	w.defaults()
	go func() { <-ctx.Done(); w.Stop() }()
	for !w.stopping.Load() {
		if err := w.runConnected(); err != nil {
			w.failed(err)
			w.sleep(w.Backoff.Next())
		}
	}
	return nil
}

func (w *Worker) failed(err error) {
	w.errors.Add(1)
	n := w.consecutive.Add(1)
	w.lastMu.Lock()
	w.lastError = err
	w.lastMu.Unlock()
	if webhookinbox.IsOutage(err) {
		w.Logf("inbox worker: the database is away (%v); trying again", err)
	} else {
		w.Logf("inbox worker: an iteration failed (error %d in a row): %v; trying again", n, err)
	}
	defer func() {
		if r := recover(); r != nil {
			w.Logf("inbox worker: OnError panicked: %v", r)
		}
	}()
	w.OnError(err)
}

// connect opens a connection: the application's Connect, or one from
// ConnString that names no statement.
func (w *Worker) connect(ctx context.Context) (*pgx.Conn, error) {
	if w.Connect != nil {
		return w.Connect(ctx)
	}
	cfg, err := pgx.ParseConfig(w.ConnString)
	if err != nil {
		return nil, err
	}
	if !strings.Contains(w.ConnString, "statement_cache_mode") {
		cfg.BuildStatementCache = func(conn *pgconn.PgConn) stmtcache.Cache {
			return stmtcache.New(conn, stmtcache.ModeDescribe, 512)
		}
	}
	return pgx.ConnectConfig(ctx, cfg)
}

// sleep waits d, or until Stop.
func (w *Worker) sleep(d time.Duration) {
	deadline := time.Now().Add(d)
	for !w.stopping.Load() && time.Now().Before(deadline) {
		time.Sleep(minDuration(50*time.Millisecond, time.Until(deadline)))
	}
}

func minDuration(a, b time.Duration) time.Duration {
	if a < b {
		return a
	}
	return b
}

func (w *Worker) runConnected() error {
	// The work's context is not the caller's: a stop lets the event in
	// hand finish and commit.
	ctx := context.Background()
	conn, err := w.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var listener *pgx.Conn
	if !w.NoListen {
		if listener, err = w.connect(ctx); err != nil {
			return err
		}
		defer listener.Close(ctx)
		if _, err := listener.Exec(ctx, "LISTEN webhook_inbox"); err != nil {
			return err
		}
	}
	for !w.stopping.Load() {
		n, err := w.RunOnce(ctx, conn)
		if err != nil {
			return err
		}
		w.Backoff.Connected()
		w.consecutive.Store(0)
		if n == 0 {
			if err := w.idle(listener); err != nil {
				return err
			}
		}
	}
	return nil
}

// idle waits for a notification, the next poll, or Stop.
func (w *Worker) idle(listener *pgx.Conn) error {
	if listener == nil {
		w.sleep(w.Poll)
		return nil
	}
	deadline := time.Now().Add(w.Poll)
	for !w.stopping.Load() && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), minDuration(100*time.Millisecond, time.Until(deadline)))
		_, err := listener.WaitForNotification(ctx)
		cancel()
		// A wait that timed out leaves the connection open; anything else ends it.
		if err == nil || !errors.Is(err, context.DeadlineExceeded) || listener.IsClosed() {
			return err
		}
	}
	return nil
}

// RunOnce works one batch on conn and returns how many events were
// leased. The lease commits on its own, so operators see them leased.
func (w *Worker) RunOnce(ctx context.Context, conn *pgx.Conn) (int, error) {
	w.defaults()
	var provider any
	if w.Provider != "" {
		provider = w.Provider
	}
	rows, err := conn.Query(ctx, nextSQL, w.Batch, w.Consumer, provider, w.Lease)
	if err != nil {
		return 0, err
	}
	var events []Event
	for rows.Next() {
		var e Event
		var payload *string
		if err := rows.Scan(&e.ID, &e.Provider, &e.EventID, &e.EventType, &payload, &e.Attempts, &e.Consumer, &e.Traceparent, &e.Origin); err != nil {
			rows.Close()
			return 0, err
		}
		if payload != nil {
			e.Payload = json.RawMessage(*payload)
		}
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if err := w.finish(ctx, conn, events); err != nil {
		if webhookinbox.SQLState(err) != takenOver {
			return 0, err
		}
		for _, e := range events {
			if err := w.finish(ctx, conn, []Event{e}); err != nil && webhookinbox.SQLState(err) != takenOver {
				return 0, err // taken over: the new holder finishes it
			}
		}
	}
	return len(events), nil
}

func (w *Worker) finish(ctx context.Context, conn *pgx.Conn, events []Event) error {
	if len(events) == 0 {
		return nil
	}
	return conn.BeginFunc(ctx, func(tx pgx.Tx) error {
		var done []string
		for _, e := range events {
			if w.stopping.Load() {
				if _, err := tx.Exec(ctx, handBackSQL, e.ID); err != nil {
					return err
				}
				continue
			}
			if _, err := tx.Exec(ctx, webhookinbox.SavepointSQL); err != nil {
				return err
			}
			if werr := w.Work(ctx, tx, e); werr != nil {
				if webhookinbox.IsOutage(werr) {
					return werr
				}
				w.OnError(werr)
				if _, err := tx.Exec(ctx, webhookinbox.RollbackToSQL); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, webhookinbox.FailSQL, e.ID, werr.Error()); err != nil {
					return err
				}
				continue
			}
			if _, err := tx.Exec(ctx, webhookinbox.ReleaseSQL); err != nil {
				return err
			}
			done = append(done, e.ID)
		}
		if len(done) > 0 {
			if _, err := tx.Exec(ctx, completeBatchSQL, done); err != nil {
				return err
			}
		}
		return nil
	})
}

// OutboundKey is the Idempotency-Key for a side effect of this event: the
// same on every attempt, whichever lease runs it.
func OutboundKey(ctx context.Context, tx pgx.Tx, lease, operation string) (string, error) {
	var key string
	err := tx.QueryRow(ctx, outboundKeySQL, lease, operation).Scan(&key)
	return key, err
}
