// Prisma 7 (the TypeScript client on a driver adapter, @prisma/adapter-pg):
// the package's statements as raw queries in Prisma's interactive
// transactions.

import { Queryable, Row, Transact } from "./db.js";

type PrismaTxLike = {
  $queryRawUnsafe(query: string, ...values: unknown[]): Promise<unknown>;
};
type PrismaLike = PrismaTxLike & {
  $transaction<T>(fn: (tx: PrismaTxLike) => Promise<T>, options?: { maxWait?: number; timeout?: number }): Promise<T>;
};

/**
 * Prisma reports a failed raw query as its own error (P2010), with the
 * database's SQLSTATE inside; the error handed on carries that SQLSTATE
 * as its `code` (and Prisma's as its `cause`), so that an unknown
 * provider and a lost connection read as they do on every other driver.
 */
function databaseError(error: unknown): unknown {
  const cause = (error as { meta?: { driverAdapterError?: { cause?: { code?: unknown; message?: unknown } } } })?.meta
    ?.driverAdapterError?.cause;
  if (cause && typeof cause.code === "string") {
    return Object.assign(new Error(String(cause.message ?? cause.code)), { code: cause.code, cause: error });
  }
  return error;
}

/** A Prisma transaction client `tx` (inside `prisma.$transaction(async (tx) => …)`). */
export function prismaClient(tx: PrismaTxLike): Queryable {
  return {
    query: async (text, params = []) => {
      try {
        return (await tx.$queryRawUnsafe(text, ...params)) as Row[];
      } catch (error) {
        throw databaseError(error);
      }
    },
  };
}

/**
 * Each call is one interactive `prisma.$transaction`. Its `timeout` is
 * Prisma's (5 s by default): the work of a delivery must end within it,
 * or Prisma rolls the transaction back and the delivery is retried.
 */
export function prisma(client: PrismaLike, options: { maxWait?: number; timeout?: number } = {}): Transact {
  return async (fn) => {
    try {
      return await client.$transaction((tx) => fn(prismaClient(tx)), options);
    } catch (error) {
      throw databaseError(error);
    }
  };
}
