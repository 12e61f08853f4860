"""pg_webhook_inbox for Python: verified, exactly-once webhook handling on
the pg_webhook_inbox PostgreSQL extension, in the caller's transaction.

- ``pg_webhook_inbox.psycopg``: ``receive`` / ``areceive``, ``Handler`` /
  ``AsyncHandler`` (psycopg 3 pools).
- ``pg_webhook_inbox.worker``: ``Worker``, the inbox's worker loop.
- Adapters: ``.starlette`` (FastAPI, Starlette), ``.django``, ``.flask``,
  ``.sqlalchemy`` (sessions).

Each adapter module imports its framework; this one imports none.
"""
from .delivery import Answer, Delivery, Status
from .errors import UnknownProvider

__all__ = ["Answer", "Delivery", "Status", "UnknownProvider"]
__version__ = "0.1.0"
