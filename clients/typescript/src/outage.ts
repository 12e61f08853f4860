// Telling a database that is away from a delivery that went wrong.

// Node's socket errors, postgres.js's own codes for a lost connection, and
// Prisma's: the server unreachable (P1001), timed out (P1002, P1008), the
// connection closed (P1017), no connection from its pool in time (P2024).
const CODES = new Set([
  "P1001",
  "P1002",
  "P1008",
  "P1017",
  "P2024",
  "ECONNREFUSED",
  "ECONNRESET",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENOTFOUND",
  "EAI_AGAIN",
  "CONNECTION_CLOSED",
  "CONNECTION_ENDED",
  "CONNECTION_DESTROYED",
  "CONNECT_TIMEOUT",
]);
// node-postgres says it in words only.
const MESSAGES =
  /Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error|Client was closed|server closed the connection|Connection ended/i;

/**
 * Whether an error means the database is away (a restart, a failover, a
 * pool with no connection to give), so that the whole delivery may be
 * tried again: SQLSTATE class 08, an administrator's shutdown (57P01–03),
 * too many connections (53300), or the driver's own word for a lost
 * connection, through the wrappers of ORMs (`cause`).
 */
export function isOutage(error: unknown, depth = 0): boolean {
  if (error === null || typeof error !== "object" || depth > 4) return false;
  const e = error as { code?: unknown; errorCode?: unknown; message?: unknown; cause?: unknown; errors?: unknown };
  if (typeof e.code === "string") {
    if (CODES.has(e.code) || /^08|^57P0[123]$|^53300$/.test(e.code)) return true;
  }
  if (typeof e.errorCode === "string" && CODES.has(e.errorCode)) return true; // Prisma's initialisation errors
  if (typeof e.message === "string" && MESSAGES.test(e.message)) return true;
  if (Array.isArray(e.errors) && e.errors.some((x) => isOutage(x, depth + 1))) return true;
  return isOutage(e.cause, depth + 1);
}

/** The SQLSTATE of an error, through the wrappers of ORMs. */
export function sqlstate(error: unknown, depth = 0): string | undefined {
  if (error === null || typeof error !== "object" || depth > 4) return undefined;
  const e = error as { code?: unknown; cause?: unknown };
  // Five characters, but not Prisma's own codes (P1xxx and up; SQLSTATE's P class is P0).
  if (typeof e.code === "string" && /^(?!P[1-9])[0-9A-Z]{5}$/.test(e.code)) return e.code;
  return sqlstate(e.cause, depth + 1);
}

/**
 * The body is larger than the handler takes (`maxBody`), or than the
 * database's webhook.max_payload_size (54000): answered 413.
 */
export class PayloadTooLarge extends Error {
  readonly status = 413;
  constructor(message = "request body too large") {
    super(message);
    this.name = "PayloadTooLarge";
  }
}

/** webhook_receive knows no provider of this name: answered 404. */
export class UnknownProvider extends Error {
  constructor(readonly provider: string) {
    super(`no provider "${provider}" is registered`);
    this.name = "UnknownProvider";
  }
}
