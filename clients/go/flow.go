package webhookinbox

// The one guarantee every adapter runs, written once.
//
// In the caller's transaction: webhook_receive verifies, deduplicates and
// claims (complete_on_commit: the commit that saves the work completes the
// event, a rollback undoes both). The work runs in a savepoint, so a
// failure undoes the work, not the claim, and is recorded with
// webhook_fail: the next delivery is a retry. The answer is handed back
// for sending only once the transaction has committed.
//
// While the database is away (a restart, a failover, a pool with no
// connection to give) the whole delivery is tried again for up to
// RetrySeconds (8: GitHub gives up after 10 s and never redelivers), then
// answered 503 with Retry-After. Trying again is safe: what the broken
// attempt wrote was rolled back with it, and one that did commit is
// answered as a duplicate the second time. Never a 500 for a delivery not
// stored.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"strings"
	"time"
)

// RetrySeconds is how long a delivery keeps trying a database that is away.
const RetrySeconds = 8

// Row is one row of a query, as every driver scans it.
type Row interface{ Scan(dest ...any) error }

// Driver is what the package needs of a database driver whose
// transaction type is T (pgx.Tx, *sql.Tx).
type Driver[T any] struct {
	// InTx runs fn in a transaction of its own: commits when it returns
	// nil, rolls back when it returns an error.
	InTx     func(ctx context.Context, fn func(tx T) error) error
	QueryRow func(ctx context.Context, tx T, sql string, args ...any) Row
	Exec     func(ctx context.Context, tx T, sql string, args ...any) error
}

// Options of a delivery.
type Options struct {
	// URL the provider called, for the schemes that sign it (Twilio, Square, HubSpot).
	URL string
	// Inbox: true queues for workers, false claims here; nil does what the provider is registered for.
	Inbox *bool
	// CompleteOnCommit: the commit of this transaction completes a claimed event.
	CompleteOnCommit bool
	// Lease of the claim ("30 seconds"); the server's default if empty.
	Lease string
}

// HeadersJSON is the request's headers as the JSON object webhook_receive reads.
func HeadersJSON(h http.Header) string {
	out := make(map[string]string, len(h))
	for name, values := range h {
		out[strings.ToLower(name)] = strings.Join(values, ", ")
	}
	b, _ := json.Marshal(out)
	return string(b)
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func receiveArgs(provider string, h http.Header, body []byte, o Options) []any {
	var inbox any
	if o.Inbox != nil {
		inbox = *o.Inbox
	}
	return []any{provider, HeadersJSON(h), body, nullable(o.Lease), inbox, nullable(o.URL), o.CompleteOnCommit}
}

// ErrUnknownProvider: webhook_receive knows no provider of that name (42704).
var ErrUnknownProvider = errors.New("no such provider is registered")

// ErrPayloadTooLarge: the body is larger than the handler takes
// (MaxBody), or than the database's webhook.max_payload_size (54000).
// Answered 413.
var ErrPayloadTooLarge = errors.New("request body too large")

// Receive is webhook_receive in the caller's open transaction tx; the
// caller commits, then sends d.Answer().
func Receive[T any](ctx context.Context, drv Driver[T], tx T, provider string, h http.Header, body []byte, o Options) (Delivery, error) {
	var d Delivery
	var status, result *string
	err := drv.QueryRow(ctx, tx, receiveSQL, receiveArgs(provider, h, body, o)...).Scan(
		&d.ID, &d.Claimed, &status, &d.Attempts, &result, &d.HTTPStatus, &d.Reason, &d.EventID,
		&d.EventType, &d.EventTypeSigned, &d.Response, &d.ResponseType)
	if err != nil {
		switch SQLState(err) {
		case unknownProviderState:
			return d, fmt.Errorf("%w: %q", ErrUnknownProvider, provider)
		case tooLargeState:
			return d, fmt.Errorf("%w: %v", ErrPayloadTooLarge, err)
		}
		return d, err
	}
	if status != nil {
		d.Status = Status(*status)
	}
	if result != nil {
		d.Result = json.RawMessage(*result)
	}
	return d, nil
}

// Work runs in the delivery's transaction; what it returns (JSON-able,
// optional) is stored with the completion and answered to duplicates.
type Work[T any] func(ctx context.Context, tx T, d Delivery) (any, error)

// Handler handles deliveries, each in a transaction of its own.
type Handler[T any] struct {
	Driver Driver[T]
	// PublicURL is the base URL the providers are configured with
	// (https://hooks.example.com); the URL is never built from the Host
	// header, which whoever sends the request chooses.
	PublicURL    string
	RetrySeconds float64
	Inbox        *bool
	// OnError hears an error that is neither an outage nor an unknown
	// provider (answered 500); nil: log.Printf.
	OnError func(error)
}

// Handle takes one delivery: its provider, headers, raw body (read before
// anything parsed it: the signature covers exactly those bytes) and the
// path and query the provider called.
func (h *Handler[T]) Handle(ctx context.Context, provider string, header http.Header, body []byte, pathAndQuery string, work Work[T]) Answer {
	if len(body) > MaxBody {
		return TooLarge()
	}
	o := Options{URL: PublicURL(h.PublicURL, pathAndQuery), Inbox: h.Inbox, CompleteOnCommit: true}
	attempt := func() (Answer, error) {
		var answer Answer
		err := h.Driver.InTx(ctx, func(tx T) error {
			d, err := Receive(ctx, h.Driver, tx, provider, header, body, o)
			if err != nil {
				return err
			}
			answer = d.Answer()
			if !d.Claimed {
				return nil
			}
			if err := h.Driver.Exec(ctx, tx, SavepointSQL); err != nil {
				return err
			}
			result, werr := work(ctx, tx, d)
			if werr == nil && result != nil {
				b, merr := json.Marshal(result)
				if merr != nil {
					werr = merr
				} else {
					werr = h.Driver.Exec(ctx, tx, completeSQL, *d.ID, string(b))
				}
			}
			if werr == nil {
				return h.Driver.Exec(ctx, tx, ReleaseSQL)
			}
			if IsOutage(werr) {
				return werr
			}
			if err := h.Driver.Exec(ctx, tx, RollbackToSQL); err != nil {
				return err
			}
			answer = Failed()
			return h.Driver.Exec(ctx, tx, FailSQL, *d.ID, werr.Error())
		})
		return answer, err
	}
	onError := h.OnError
	if onError == nil {
		onError = func(err error) { log.Printf("webhookinbox: %s delivery: %v", provider, err) }
	}
	return Retrying(ctx, attempt, h.retrySeconds(), provider, onError)
}

func (h *Handler[T]) retrySeconds() float64 {
	if h.RetrySeconds > 0 {
		return h.RetrySeconds
	}
	return RetrySeconds
}

// Retrying runs attempt (a whole delivery, its own transaction) again
// while the database is away; 503 once retrySeconds have passed. Any other
// error is the application's: answered 500 and left to the provider's retry.
func Retrying(ctx context.Context, attempt func() (Answer, error), retrySeconds float64, provider string, onError func(error)) Answer {
	deadline := time.Now().Add(time.Duration(retrySeconds * float64(time.Second)))
	wait := 100 * time.Millisecond
	for {
		answer, err := attempt()
		switch {
		case err == nil:
			return answer
		case errors.Is(err, ErrUnknownProvider):
			return UnknownProvider(provider)
		case errors.Is(err, ErrPayloadTooLarge):
			return TooLarge()
		case !IsOutage(err):
			onError(err)
			return Refused()
		case time.Now().Add(wait).After(deadline) || ctx.Err() != nil:
			return Unavailable()
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return Unavailable()
		}
		if wait *= 2; wait > time.Second {
			wait = time.Second
		}
	}
}

// PublicURL is the URL the provider called: the configured public base,
// then the path and query; empty without a base, and the schemes that
// sign the URL then refuse the delivery (missing_url).
func PublicURL(base, pathAndQuery string) string {
	if base == "" {
		return ""
	}
	return strings.TrimRight(base, "/") + pathAndQuery
}
