// Package webhookinbox is verified, exactly-once webhook handling on the
// pg_webhook_inbox PostgreSQL extension, in the caller's transaction:
// the database checks the signature, deduplicates and claims the delivery,
// and the handler's work commits with the event's completion or rolls
// back with it.
//
// The core takes any driver through Driver; SQLDB is database/sql's
// (lib/pq, pgx's stdlib), and the pgxinbox package pgx's, with the inbox's
// worker loop. HTTP serves a net/http handler, which chi, echo
// (echo.WrapHandler) and gin (gin.WrapH) mount as they are.
package webhookinbox

import (
	"encoding/json"
)

// Status is webhook.claim_status: what a delivery was answered.
type Status string

const (
	Claimed    Status = "claimed"
	Retry      Status = "retry"
	Duplicate  Status = "duplicate"
	InProgress Status = "in_progress"
	Dead       Status = "dead"
	Rejected   Status = "rejected"
	Queued     Status = "queued"
	Stale      Status = "stale"
	Handshake  Status = "handshake"
	Filtered   Status = "filtered"
)

// Delivery is one row of webhook_receive: a webhook.receive_result.
type Delivery struct {
	ID              *string
	Claimed         bool
	Status          Status
	Attempts        *int32
	Result          json.RawMessage
	HTTPStatus      int32
	Reason          *string
	EventID         *string
	EventType       *string
	EventTypeSigned *bool
	Response        *string
	ResponseType    *string
}

// Answer is what the provider is to hear.
type Answer struct {
	Status      int
	Body        string
	ContentType string
	Headers     map[string]string
}

func jsonAnswer(status int, fields map[string]any) Answer {
	body := map[string]any{}
	for k, v := range fields {
		switch v := v.(type) {
		case nil:
		case *string:
			if v != nil {
				body[k] = *v
			}
		case json.RawMessage:
			if len(v) > 0 {
				body[k] = v
			}
		default:
			body[k] = v
		}
	}
	b, _ := json.Marshal(body)
	return Answer{Status: status, Body: string(b), ContentType: "application/json", Headers: map[string]string{}}
}

// Answer is what to send the provider, once the transaction has committed:
// the table of the extension's README, decided here for every adapter.
func (d Delivery) Answer() Answer {
	if d.Response != nil { // an endpoint check: exactly this body
		t := "text/plain"
		if d.ResponseType != nil {
			t = *d.ResponseType
		}
		return Answer{Status: 200, Body: *d.Response, ContentType: t, Headers: map[string]string{}}
	}
	var result json.RawMessage
	if d.Status == Duplicate {
		result = d.Result
	}
	return jsonAnswer(int(d.HTTPStatus), map[string]any{"status": string(d.Status), "reason": d.Reason, "result": result})
}

// Failed: the work failed and was recorded; the next delivery retries it.
func Failed() Answer { return jsonAnswer(500, map[string]any{"status": "failed"}) }

// Unavailable: the database could not be reached in time; nothing was
// stored. Every provider retries a 503.
func Unavailable() Answer {
	a := jsonAnswer(503, map[string]any{"status": "unavailable"})
	a.Headers["Retry-After"] = "30"
	return a
}

// UnknownProvider: no provider of that name is registered.
// TooLarge is the answer to a body larger than the handler or the
// database takes.
func TooLarge() Answer { return jsonAnswer(413, map[string]any{"status": "too_large"}) }

// Refused is the answer to a delivery the database refused for a reason
// that is no outage: logged, never sent; the provider retries.
func Refused() Answer { return jsonAnswer(500, map[string]any{"status": "error"}) }

func UnknownProvider(provider string) Answer {
	return jsonAnswer(404, map[string]any{"status": "unknown_provider", "provider": provider})
}
