// What webhook_receive answered, and what the provider is to hear. One
// table decides every answer (the extension's README): a handler never
// picks a status code itself, so every framework adapter answers alike.

/** `webhook.claim_status`: what a delivery was answered. */
export type Status =
  | "claimed"
  | "retry"
  | "duplicate"
  | "in_progress"
  | "dead"
  | "rejected"
  | "queued"
  | "stale"
  | "handshake"
  | "filtered";

/** One row of webhook_receive: a `webhook.receive_result`. */
export interface Delivery {
  id: string | null;
  claimed: boolean;
  status: Status;
  attempts: number | null;
  result: unknown;
  httpStatus: number;
  reason: string | null;
  eventId: string | null;
  eventType: string | null;
  eventTypeSigned: boolean | null;
  response: string | null;
  responseType: string | null;
}

/** An HTTP answer: status code, body, its type and extra headers. */
export interface Answer {
  status: number;
  body: string;
  contentType: string;
  headers: Record<string, string>;
}

function json(status: number, fields: Record<string, unknown>): Answer {
  const body: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(fields)) if (v !== null && v !== undefined) body[k] = v;
  return { status, body: JSON.stringify(body), contentType: "application/json", headers: {} };
}

/** What to send the provider, once the transaction has committed. */
export function answerFor(d: Delivery): Answer {
  if (d.response !== null) {
    // An endpoint check: exactly this body.
    return { status: 200, body: d.response, contentType: d.responseType ?? "text/plain", headers: {} };
  }
  return json(d.httpStatus, {
    status: d.status,
    reason: d.reason,
    result: d.status === "duplicate" ? d.result : null,
  });
}

/** The work failed and was recorded: the next delivery retries it. */
export const failed = (): Answer => json(500, { status: "failed" });

/** The database could not be reached in time; nothing was stored. Every provider retries a 503. */
export const unavailable = (): Answer => ({
  ...json(503, { status: "unavailable" }),
  headers: { "Retry-After": "30" },
});

export const unknownProvider = (provider: string): Answer =>
  json(404, { status: "unknown_provider", provider });

/** The body is larger than the handler or the database takes. */
export const tooLarge = (): Answer => json(413, { status: "too_large" });

/** The database refused the delivery for a reason logged, never sent: the provider retries. */
export const refusedAnswer = (): Answer => json(500, { status: "error" });

type Row = Record<string, unknown>;

/** A row of webhook_receive, as any driver returns it. */
export function deliveryFrom(row: Row): Delivery {
  let result = row.result ?? null;
  if (typeof result === "string") result = JSON.parse(result); // drivers that hand jsonb over as text
  return {
    id: (row.id as string | null) ?? null,
    claimed: row.claimed === true,
    status: row.status as Status,
    attempts: row.attempts === null || row.attempts === undefined ? null : Number(row.attempts),
    result,
    httpStatus: Number(row.http_status),
    reason: (row.reason as string | null) ?? null,
    eventId: (row.event_id as string | null) ?? null,
    eventType: (row.event_type as string | null) ?? null,
    eventTypeSigned: (row.event_type_signed as boolean | null) ?? null,
    response: (row.response as string | null) ?? null,
    responseType: (row.response_type as string | null) ?? null,
  };
}
