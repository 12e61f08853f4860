package webhookinbox

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
)

// SQLState is the SQLSTATE behind an error, from any driver whose errors
// say it (pgx's *pgconn.PgError, lib/pq's *pq.Error), or "".
func SQLState(err error) string {
	var e interface{ SQLState() string }
	if errors.As(err, &e) {
		return e.SQLState()
	}
	return ""
}

// IsOutage says whether an error means the database is away (a restart, a
// failover, a pool with no connection to give), so that the whole
// delivery may be tried again: SQLSTATE class 08, an administrator's
// shutdown (57P01-03), too many connections (53300), or a lost or
// refused connection.
func IsOutage(err error) bool {
	if err == nil {
		return false
	}
	if state := SQLState(err); state != "" {
		return strings.HasPrefix(state, "08") || state == "57P01" || state == "57P02" || state == "57P03" || state == "53300"
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, driver.ErrBadConn) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	// pgx says some of these in words only.
	msg := err.Error()
	for _, s := range []string{"conn closed", "connection refused", "connection reset", "broken pipe",
		"failed to connect", "unexpected EOF", "bad connection"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
