// Express and Fastify, on Node's own request objects.

import type { IncomingMessage } from "node:http";
import { Answer, refusedAnswer, tooLarge } from "./answers.js";
import { MAX_BODY, WebhookHandler, Work } from "./flow.js";
import { PayloadTooLarge } from "./outage.js";

/**
 * The raw bytes of a Node request that no body parser has read, up to
 * `limit`: PayloadTooLarge for a Content-Length over it, before anything
 * is read, or for a stream that goes past it. Past the limit, the rest is
 * drained, not kept, and the socket left open, so that the 413 reaches
 * the sender (destroying the request would reset its connection instead).
 */
export function readBody(req: IncomingMessage, limit = MAX_BODY): Promise<Buffer> {
  if (Number(req.headers["content-length"] ?? NaN) > limit) return Promise.reject(new PayloadTooLarge());
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const data = (chunk: Buffer) => {
      size += chunk.length;
      if (size <= limit) {
        chunks.push(chunk);
        return;
      }
      req.off("data", data);
      req.off("end", end);
      req.resume();
      reject(new PayloadTooLarge());
    };
    const end = () => resolve(Buffer.concat(chunks));
    req.on("data", data);
    req.on("end", end);
    req.on("error", reject);
  });
}

/**
 * The answer to what escaped a delivery: 413 for a body too large, else a
 * 500 that says nothing of the database (logged here).
 */
function escaped(error: unknown): Answer {
  if (error instanceof PayloadTooLarge || (error as { code?: unknown })?.code === "FST_ERR_CTP_BODY_TOO_LARGE")
    return tooLarge();
  console.error("pg-webhook-inbox: webhook delivery failed:", error);
  return refusedAnswer();
}

type ExpressRequest = IncomingMessage & { body?: unknown; params?: Record<string, string>; originalUrl?: string };
type ExpressResponse = {
  status(code: number): ExpressResponse;
  set(headers: Record<string, string>): ExpressResponse;
  type(type: string): ExpressResponse;
  send(body: string): unknown;
};

/**
 * Express 4 and 5: `app.post("/webhooks/:provider", webhookExpress(handler, work))`.
 * Mount it where no JSON or urlencoded parser has run (or behind
 * `express.raw({ type: "*\/*" })`): the signature covers the raw bytes,
 * which a parsed body has lost; it refuses to run on one.
 */
export function webhookExpress(handler: WebhookHandler, work: Work, provider?: string) {
  return async (req: ExpressRequest, res: ExpressResponse, next: (err?: unknown) => void) => {
    let a: Answer;
    try {
      let body: Buffer;
      if (Buffer.isBuffer(req.body)) body = req.body;
      else if (req.body !== undefined && req.readableEnded)
        return next(
          new Error("webhookExpress: the body was parsed before the webhook route; mount it before express.json(), or behind express.raw()"),
        );
      else body = await readBody(req, handler.maxBody);
      const name = provider ?? req.params?.provider ?? "";
      a = await handler.handle(name, req.headers, body, work, req.originalUrl ?? req.url ?? "");
    } catch (error) {
      a = escaped(error);
    }
    res.status(a.status).set(a.headers).type(a.contentType).send(a.body);
  };
}

type FastifyLike = {
  removeAllContentTypeParsers(): void;
  setErrorHandler(handler: (error: unknown, req: unknown, reply: FastifyReplyLike) => unknown): void;
  addContentTypeParser(
    type: string,
    opts: { parseAs: "buffer"; bodyLimit: number },
    parser: (req: unknown, body: Buffer, done: (err: Error | null, body?: Buffer) => void) => void,
  ): void;
  post(path: string, handler: (req: FastifyRequestLike, reply: FastifyReplyLike) => Promise<unknown>): void;
};
type FastifyRequestLike = { body: unknown; headers: IncomingMessage["headers"]; params: unknown; url: string };
type FastifyReplyLike = {
  code(status: number): FastifyReplyLike;
  type(type: string): FastifyReplyLike;
  headers(h: Record<string, string>): FastifyReplyLike;
  send(body: string): FastifyReplyLike;
};

/**
 * A Fastify plugin: `app.register(webhookFastify(handler, work))` serves
 * `POST /webhooks/:provider` (or `path`). Inside the plugin every body is
 * kept as its raw bytes, up to the handler's maxBody (Fastify's own limit
 * is 1 MiB), and an error is answered as every adapter answers it, never
 * with Fastify's serialisation of it; the application's other routes keep
 * their parsers and error handler.
 */
export function webhookFastify(handler: WebhookHandler, work: Work, path = "/webhooks/:provider") {
  return async (app: FastifyLike) => {
    const send = (reply: FastifyReplyLike, a: Answer) => reply.code(a.status).type(a.contentType).headers(a.headers).send(a.body);
    app.removeAllContentTypeParsers();
    app.addContentTypeParser("*", { parseAs: "buffer", bodyLimit: handler.maxBody }, (_req, body, done) => done(null, body));
    app.setErrorHandler((error, _req, reply) => send(reply, escaped(error)));
    app.post(path, async (req, reply) => {
      const body = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
      const name = (req.params as { provider?: string }).provider ?? "";
      return send(reply, await handler.handle(name, req.headers, body, work, req.url));
    });
  };
}
