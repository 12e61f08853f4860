"""What ``webhook_receive`` answered, and what the provider is to hear.

One table decides every answer (the README's): a handler never picks a
status code itself, so every framework adapter answers alike.
"""
from __future__ import annotations

import enum
import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional


class Status(str, enum.Enum):
    """``webhook.claim_status``: what a delivery was answered."""

    CLAIMED = "claimed"
    RETRY = "retry"
    DUPLICATE = "duplicate"
    IN_PROGRESS = "in_progress"
    DEAD = "dead"
    REJECTED = "rejected"
    QUEUED = "queued"
    STALE = "stale"
    HANDSHAKE = "handshake"
    FILTERED = "filtered"


@dataclass(frozen=True)
class Answer:
    """An HTTP answer: status code, body, its type and extra headers."""

    status: int
    body: str
    content_type: str = "application/json"
    headers: Mapping[str, str] = field(default_factory=dict)

    @staticmethod
    def json(code: int, **fields: Any) -> "Answer":
        return Answer(code, json.dumps({k: v for k, v in fields.items() if v is not None}))

    @staticmethod
    def failed() -> "Answer":
        """The work failed and was recorded: the next delivery retries it."""
        return Answer.json(500, status="failed")

    @staticmethod
    def unavailable() -> "Answer":
        """The database could not be reached in time; nothing was stored.
        Every provider retries a 503."""
        return Answer(503, json.dumps({"status": "unavailable"}), headers={"Retry-After": "30"})

    @staticmethod
    def too_large() -> "Answer":
        """The body is larger than the handler or the database takes."""
        return Answer.json(413, status="too_large")

    @staticmethod
    def error() -> "Answer":
        """The database refused the delivery for a reason logged, never
        sent: the provider retries."""
        return Answer.json(500, status="error")

    @staticmethod
    def unknown_provider(provider: str) -> "Answer":
        return Answer.json(404, status="unknown_provider", provider=provider)


@dataclass(frozen=True)
class Delivery:
    """One row of ``webhook_receive``: a ``webhook.receive_result``."""

    id: Optional[uuid.UUID]
    claimed: bool
    status: Status
    attempts: Optional[int]
    result: Any
    http_status: int
    reason: Optional[str]
    event_id: Optional[str]
    event_type: Optional[str]
    event_type_signed: Optional[bool]
    response: Optional[str]
    response_type: Optional[str]

    @classmethod
    def from_row(cls, row) -> "Delivery":
        (id_, claimed, status, attempts, result, http_status, reason, event_id, event_type,
         event_type_signed, response, response_type) = row
        if isinstance(result, str):  # drivers that hand jsonb over as text
            result = json.loads(result)
        if id_ is not None and not isinstance(id_, uuid.UUID):
            id_ = uuid.UUID(str(id_))
        return cls(id_, bool(claimed), Status(status), attempts, result, http_status, reason,
                   event_id, event_type, event_type_signed, response, response_type)

    @property
    def owns_event(self) -> bool:
        """This transaction holds the event: do the work, or record its failure."""
        return self.claimed

    def answer(self) -> Answer:
        """What to send the provider, once the transaction has committed."""
        if self.response is not None:  # an endpoint check: exactly this body
            return Answer(200, self.response, self.response_type or "text/plain")
        return Answer.json(self.http_status, status=self.status.value, reason=self.reason,
                           result=self.result if self.status is Status.DUPLICATE else None)
