// Express and Fastify, on Node's own request objects.

import type { IncomingMessage } from "node:http";
import { WebhookHandler, Work } from "./flow.js";

/** The raw bytes of a Node request that no body parser has read. */
export async function readBody(req: IncomingMessage, limit = 10 * 1024 * 1024): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > limit) throw Object.assign(new Error("request body too large"), { status: 413 });
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
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
    try {
      let body: Buffer;
      if (Buffer.isBuffer(req.body)) body = req.body;
      else if (req.body !== undefined && req.readableEnded)
        throw new Error("webhookExpress: the body was parsed before the webhook route; mount it before express.json(), or behind express.raw()");
      else body = await readBody(req);
      const name = provider ?? req.params?.provider ?? "";
      const a = await handler.handle(name, req.headers, body, work, req.originalUrl ?? req.url ?? "");
      res.status(a.status).set(a.headers).type(a.contentType).send(a.body);
    } catch (error) {
      next(error);
    }
  };
}

type FastifyLike = {
  removeAllContentTypeParsers(): void;
  addContentTypeParser(
    type: string,
    opts: { parseAs: "buffer" },
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
 * kept as its raw bytes; the application's other routes keep their parsers.
 */
export function webhookFastify(handler: WebhookHandler, work: Work, path = "/webhooks/:provider") {
  return async (app: FastifyLike) => {
    app.removeAllContentTypeParsers();
    app.addContentTypeParser("*", { parseAs: "buffer" }, (_req, body, done) => done(null, body));
    app.post(path, async (req, reply) => {
      const body = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
      const name = (req.params as { provider?: string }).provider ?? "";
      const a = await handler.handle(name, req.headers, body, work, req.url);
      return reply.code(a.status).type(a.contentType).headers(a.headers).send(a.body);
    });
  };
}
