// Package pgxinbox is webhookinbox on pgx (v4): the Driver of a pgxpool,
// and the inbox's worker loop.
package pgxinbox

import (
	"context"

	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"

	webhookinbox "pg_webhook_inbox/clients/go"
)

// Pool is the Driver of a pgxpool.Pool: each delivery in a transaction of
// its own (pgx.BeginFunc). A connection a restart broke is closed by pgx
// and not pooled again.
func Pool(pool *pgxpool.Pool) webhookinbox.Driver[pgx.Tx] {
	return webhookinbox.Driver[pgx.Tx]{
		InTx: func(ctx context.Context, fn func(pgx.Tx) error) error {
			return pool.BeginFunc(ctx, fn)
		},
		QueryRow: QueryRow,
		Exec:     Exec,
	}
}

// QueryRow and Exec on a pgx.Tx, for Receive in the caller's own transaction.
func QueryRow(ctx context.Context, tx pgx.Tx, q string, args ...any) webhookinbox.Row {
	return tx.QueryRow(ctx, q, args...)
}

func Exec(ctx context.Context, tx pgx.Tx, q string, args ...any) error {
	_, err := tx.Exec(ctx, q, args...)
	return err
}

// Tx is the Driver for Receive inside a transaction the caller opened.
var Tx = webhookinbox.Driver[pgx.Tx]{QueryRow: QueryRow, Exec: Exec}

// NewHandler is a Handler on pool.
func NewHandler(pool *pgxpool.Pool) *webhookinbox.Handler[pgx.Tx] {
	return &webhookinbox.Handler[pgx.Tx]{Driver: Pool(pool)}
}
