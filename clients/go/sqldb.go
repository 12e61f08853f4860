package webhookinbox

import (
	"context"
	"database/sql"
)

// SQLDB is the Driver of database/sql (lib/pq, pgx's stdlib): each
// delivery in a transaction of db's own. A connection a restart broke is
// discarded by database/sql itself.
func SQLDB(db *sql.DB) Driver[*sql.Tx] {
	return Driver[*sql.Tx]{
		InTx: func(ctx context.Context, fn func(*sql.Tx) error) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if err := fn(tx); err != nil {
				_ = tx.Rollback()
				return err
			}
			return tx.Commit()
		},
		QueryRow: func(ctx context.Context, tx *sql.Tx, q string, args ...any) Row {
			return tx.QueryRowContext(ctx, q, args...)
		},
		Exec: func(ctx context.Context, tx *sql.Tx, q string, args ...any) error {
			_, err := tx.ExecContext(ctx, q, args...)
			return err
		},
	}
}
