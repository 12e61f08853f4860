"""Starlette and FastAPI: an endpoint for ``/webhooks/{provider}``.

    app.add_api_route("/webhooks/{provider}", webhook_endpoint(AsyncHandler(pool), work),
                      methods=["POST"])                              # FastAPI
    Route("/webhooks/{provider}", webhook_endpoint(handler, work), methods=["POST"])  # Starlette

The body is read as bytes before anything parses it: signatures cover
exactly those bytes, and a framework's JSON model re-serialised is not them.
It is read up to the handler's ``max_body`` (10 MiB), a larger one
answered 413 without reading the rest.
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

from . import flow
from .delivery import Answer, Delivery
from .errors import PayloadTooLarge
from .psycopg import AsyncHandler


def response(answer: Answer) -> Response:
    return Response(answer.body, status_code=answer.status, media_type=answer.content_type,
                    headers=dict(answer.headers))


def path_and_query(request: Request) -> str:
    """What the provider called after the public base URL: the schemes
    that sign the URL verify the handler's ``public_url`` + this."""
    query = request.url.query
    return request.url.path + (f"?{query}" if query else "")


def webhook_endpoint(handler: AsyncHandler, work: Callable[[Any, Delivery], Awaitable[Any]],
                     provider: str | None = None) -> Callable[[Request], Awaitable[Response]]:
    """The provider comes from the path parameter ``provider``, unless
    given here for a route of one provider's own."""

    async def endpoint(request: Request) -> Response:
        try:
            body = await flow.read_body_async(request.headers.get("content-length"), request.stream(),
                                              handler.max_body)
        except PayloadTooLarge:
            return response(Answer.too_large())
        name = provider or request.path_params["provider"]
        return response(await handler(name, request.headers, body, work, path=path_and_query(request)))

    return endpoint
