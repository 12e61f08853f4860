package pgxinbox_test

// The worker loop against the real inbox: a pool of workers, a failing
// event among others, a worker killed holding a batch, one stopped by
// SIGTERM, and the database restarted under them. Every test asserts that
// each event's work committed exactly once.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v4"

	webhookinbox "pg_webhook_inbox/clients/go"
	"pg_webhook_inbox/clients/go/pgxinbox"
)

func queue(t *testing.T, run string, n int) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for i := 0; i < n; i++ {
		body := stripeEvent(fmt.Sprintf("evt_%s_%d", run, i), run)
		err := conn.BeginFunc(ctx, func(tx pgx.Tx) error {
			d, err := webhookinbox.Receive(ctx, pgxinbox.Tx, tx, "stripe_inbox", stripeHeaders(body, stripeSecret), body, webhookinbox.Options{})
			if err == nil && d.Status != webhookinbox.Queued {
				err = fmt.Errorf("answered %s", d.Status)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func onceEach(t *testing.T, run string) int {
	t.Helper()
	var events, most int
	if err := admin(t, "SELECT count(*), coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM orders WHERE handler = 'worker' "+
		"AND event_id LIKE $1 GROUP BY event_id) AS per_event", "evt_"+run+"_%").Scan(&events, &most); err != nil {
		t.Fatal(err)
	}
	if most > 1 {
		t.Fatalf("an event's work committed %d times", most)
	}
	return events
}

func waitFor(t *testing.T, run string, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if orders(t, "evt_"+run+"_", "worker") >= n {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%d of %d events done after %s", orders(t, "evt_"+run+"_", "worker"), n, within)
}

func plain(ctx context.Context, tx pgx.Tx, e pgxinbox.Event) error {
	_, err := tx.Exec(ctx, insertWorker, e.Provider, e.EventID, e.EventType)
	return err
}

type workerPool struct {
	workers []*pgxinbox.Worker
	wg      sync.WaitGroup
}

func startPool(t *testing.T, n int, configure func(*pgxinbox.Worker)) *workerPool {
	p := &workerPool{}
	for i := 0; i < n; i++ {
		w := &pgxinbox.Worker{ConnString: os.Getenv("DATABASE_URL"), Work: plain}
		configure(w)
		p.workers = append(p.workers, w)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			if err := w.Run(context.Background()); err != nil {
				t.Error(err)
			}
		}()
	}
	return p
}

func (p *workerPool) stop() {
	for _, w := range p.workers {
		w.Stop()
	}
	p.wg.Wait()
}

func TestPoolOfWorkersDoesEveryEventOnce(t *testing.T) {
	run := newRun()
	queue(t, run, 60)
	p := startPool(t, 3, func(w *pgxinbox.Worker) { w.Batch = 7 })
	waitFor(t, run, 60, 30*time.Second)
	p.stop()
	if n := onceEach(t, run); n != 60 {
		t.Fatal(n)
	}
}

func TestFailingEventUndoesItsOwnWorkOnly(t *testing.T) {
	run := newRun()
	queue(t, run, 10)
	var mu sync.Mutex
	var heard []string
	p := startPool(t, 1, func(w *pgxinbox.Worker) {
		w.Batch = 10
		w.OnError = func(err error) { mu.Lock(); heard = append(heard, err.Error()); mu.Unlock() }
		w.Work = func(ctx context.Context, tx pgx.Tx, e pgxinbox.Event) error {
			if err := plain(ctx, tx, e); err != nil {
				return err
			}
			if e.EventID == "evt_"+run+"_3" {
				return errors.New("the payment service said no")
			}
			return nil
		}
	})
	waitFor(t, run, 9, 30*time.Second)
	time.Sleep(300 * time.Millisecond)
	p.stop()
	if n := onceEach(t, run); n != 9 || orders(t, "evt_"+run+"_3", "worker") != 0 {
		t.Fatal(n)
	}
	if strings.Join(heard, "|") != "the payment service said no" {
		t.Fatal(heard)
	}
	var attempts int
	var lastError string
	if err := admin(t, "SELECT i.attempts, i.last_error FROM webhook.inbox i JOIN webhook.deliveries a ON a.id = i.delivery_id "+
		"WHERE a.event_id = $1", "evt_"+run+"_3").Scan(&attempts, &lastError); err != nil {
		t.Fatal(err)
	}
	if attempts != 1 || lastError != "the payment service said no" {
		t.Fatal(attempts, lastError)
	}
}

// child starts this test binary as a worker (TestMain) and waits for its
// first "working" line.
func child(t *testing.T, msPerEvent int, lease string) (*exec.Cmd, string) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), fmt.Sprintf("PGWI_WORKER_CHILD=%d,%s", msPerEvent, lease))
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "working ") {
		t.Fatalf("%q %v", line, err)
	}
	return cmd, strings.TrimSpace(strings.TrimPrefix(line, "working "))
}

func TestWorkerKilledHoldingABatchLosesNothing(t *testing.T) {
	run := newRun()
	queue(t, run, 12)
	victim, _ := child(t, 30000, "2 seconds")
	_ = victim.Process.Kill()
	_ = victim.Wait()
	p := startPool(t, 2, func(w *pgxinbox.Worker) { w.Batch = 5; w.Lease = "30 seconds" })
	waitFor(t, run, 12, 30*time.Second)
	p.stop()
	if n := onceEach(t, run); n != 12 {
		t.Fatal(n)
	}
}

func TestSigtermFinishesTheEventInHandAndHandsTheRestBack(t *testing.T) {
	run := newRun()
	queue(t, run, 5)
	w, inHand := child(t, 500, "10 minutes")
	_ = w.Process.Signal(syscall.SIGTERM)
	if err := w.Wait(); err != nil {
		t.Fatal(err)
	}
	// The event it named (perhaps one another test left in the inbox: the
	// oldest ready events are leased first).
	if n := orders(t, inHand, "worker"); n != 1 {
		t.Fatalf("the event in hand (%s) committed %d times", inHand, n)
	}
	// The rest were handed back at once, not after their ten-minute leases.
	p := startPool(t, 1, func(w *pgxinbox.Worker) { w.Batch = 5 })
	waitFor(t, run, 5, 10*time.Second)
	p.stop()
	if n := onceEach(t, run); n != 5 {
		t.Fatal(n)
	}
}

func TestRestartUnderTheWorkersLosesNothingAndRepeatsNothing(t *testing.T) {
	run := newRun()
	queue(t, run, 80)
	p := startPool(t, 3, func(w *pgxinbox.Worker) {
		w.Batch = 5
		w.Lease = "3 seconds"
		w.Backoff = pgxinbox.Backoff{First: 100 * time.Millisecond, Last: 500 * time.Millisecond}
		w.Work = func(ctx context.Context, tx pgx.Tx, e pgxinbox.Event) error {
			time.Sleep(20 * time.Millisecond)
			return plain(ctx, tx, e)
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for orders(t, "evt_"+run+"_", "worker") < 10 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	restartServer(t)
	waitFor(t, run, 80, 40*time.Second)
	p.stop()
	if n := onceEach(t, run); n != 80 {
		t.Fatal(n)
	}
}

func TestBackoffDoublesWithJitterAndStartsOverOnceConnected(t *testing.T) {
	b := pgxinbox.Backoff{First: 500 * time.Millisecond, Last: 30 * time.Second}
	for _, step := range []time.Duration{500, 1000, 2000, 4000, 8000, 16000, 30000, 30000} {
		step *= time.Millisecond
		if w := b.Next(); w < step/2 || w > step {
			t.Fatalf("%s for %s", w, step)
		}
	}
	b.Connected()
	if w := b.Next(); w < 250*time.Millisecond || w > 500*time.Millisecond {
		t.Fatal(w)
	}
}
