// The Fetch API's Request and Response: a Next.js route handler
// (app/api/webhooks/[provider]/route.ts), Hono, Bun, Deno, workers.

import { Answer, tooLarge } from "./answers.js";
import { WebhookHandler, Work } from "./flow.js";
import { PayloadTooLarge } from "./outage.js";

export function toResponse(a: Answer): Response {
  return new Response(a.body, { status: a.status, headers: { "Content-Type": a.contentType, ...a.headers } });
}

type Params = { provider?: string | string[] };
/** Next.js 15 and later hand the route's params over as a promise; earlier, as an object. */
export type RouteContext = { params?: Params | Promise<Params> };

/**
 * The raw bytes of a fetch `Request`'s body, up to `limit`:
 * PayloadTooLarge for a Content-Length over it, before anything is read,
 * or for a stream that goes past it (the rest is not read).
 */
export async function readRequestBody(request: Request, limit: number): Promise<Uint8Array> {
  const declared = Number(request.headers.get("content-length") ?? NaN);
  if (declared > limit) throw new PayloadTooLarge();
  if (!request.body) return new Uint8Array(0);
  const reader = request.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > limit) {
      await reader.cancel();
      throw new PayloadTooLarge();
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks);
}

/**
 * Takes one delivery from a fetch `Request`. The body is read as bytes,
 * before anything parses it: the signature covers exactly those bytes,
 * which `request.json()` would lose and `request.text()` would alter where
 * they are not UTF-8.
 */
export async function handleRequest(handler: WebhookHandler, work: Work, request: Request, provider: string): Promise<Response> {
  let body: Uint8Array;
  try {
    body = await readRequestBody(request, handler.maxBody);
  } catch (error) {
    if (error instanceof PayloadTooLarge) return toResponse(tooLarge());
    throw error;
  }
  const url = new URL(request.url);
  return toResponse(await handler.handle(provider, request.headers, body, work, url.pathname + url.search));
}

/**
 * A Next.js App Router route handler:
 * `export const POST = webhookRoute(handler, work);` in
 * `app/api/webhooks/[provider]/route.ts` (or give `provider` for a route
 * of one provider's own).
 */
export function webhookRoute(handler: WebhookHandler, work: Work, provider?: string) {
  return async (request: Request, context: RouteContext = {}): Promise<Response> => {
    const params = (await context.params) ?? {};
    const name = provider ?? (Array.isArray(params.provider) ? params.provider[0] : params.provider);
    if (!name) throw new Error("webhookRoute: the route has no [provider] segment and no provider was given");
    return handleRequest(handler, work, request, name);
  };
}

/** Hono: `app.post("/webhooks/:provider", webhookHono(handler, work))`. */
export function webhookHono(handler: WebhookHandler, work: Work, provider?: string) {
  return (c: { req: { raw: Request; param(name: string): string | undefined } }): Promise<Response> =>
    handleRequest(handler, work, c.req.raw, provider ?? c.req.param("provider") ?? "");
}
