"""Every way the package takes a delivery, each as ``send(provider,
headers, body) -> (status, content_type, body, headers)`` through the
framework's own request handling, with the same work: one order row,
raising for an event in ``failing``."""

import os

from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from pg_webhook_inbox.psycopg import AsyncHandler, Handler

AWAY = "postgresql://clients_app@127.0.0.1:1/nowhere?connect_timeout=1"
INSERT = "INSERT INTO orders (provider, event_id, event_type, handler) VALUES (%s, %s, %s, %s)"


class Failing(Exception):
    pass


class Trouble:
    """What goes wrong in the work, per event id: ``restart`` (the database
    restarts before the work writes: its connection is cut) and ``fail``
    (the work raises after writing)."""

    def __init__(self):
        self.fail, self.restart = set(), set()

    def before(self, event_id):
        if event_id in self.restart:
            self.restart.discard(event_id)
            from conftest import restart_server
            restart_server(0.3)

    def after(self, event_id):
        if event_id in self.fail:
            raise Failing(f"{event_id} fails")


def psycopg_work(name, failing):
    def work(conn, delivery):
        failing.before(delivery.event_id)
        conn.execute(INSERT, ("stripe", delivery.event_id, delivery.event_type, name))
        failing.after(delivery.event_id)
        return {"order": delivery.event_id}
    return work


def async_work(name, failing):
    async def work(conn, delivery):
        failing.before(delivery.event_id)
        await conn.execute(INSERT, ("stripe", delivery.event_id, delivery.event_type, name))
        failing.after(delivery.event_id)
        return {"order": delivery.event_id}
    return work


def pool(url, **kw):
    return ConnectionPool(url, min_size=1, max_size=4, open=True, check=ConnectionPool.check_connection, **kw)


class Direct:
    """A psycopg Handler called as an application's own route would."""
    name = "psycopg"

    def __init__(self, url, failing: Trouble, retry_seconds=8.0):
        self.pool = pool(url, timeout=1.0)
        self.handler = Handler(self.pool, retry_seconds=retry_seconds)
        self.work = psycopg_work(self.name, failing)

    def send(self, provider, headers, body):
        a = self.handler(provider, headers, body, self.work, path=f"/webhooks/{provider}")
        return a.status, a.content_type, a.body, dict(a.headers)

    def close(self):
        self.pool.close()


class FastApi:
    """AsyncHandler behind FastAPI, through Starlette's test client."""
    name = "fastapi"

    def __init__(self, url, failing: Trouble, retry_seconds=8.0):
        from contextlib import asynccontextmanager

        from fastapi import FastAPI
        from fastapi.testclient import TestClient

        from pg_webhook_inbox.starlette import webhook_endpoint

        apool = AsyncConnectionPool(url, min_size=1, max_size=4, open=False,
                                    check=AsyncConnectionPool.check_connection, timeout=1.0)

        @asynccontextmanager
        async def lifespan(_app):
            await apool.open()
            yield
            await apool.close()

        app = FastAPI(lifespan=lifespan)
        app.add_api_route("/webhooks/{provider}",
                          webhook_endpoint(AsyncHandler(apool, retry_seconds=retry_seconds), async_work(self.name, failing)),
                          methods=["POST"])
        self.client = TestClient(app)
        self.client.__enter__()

    def send(self, provider, headers, body):
        r = self.client.post(f"/webhooks/{provider}", content=body, headers=headers)
        return r.status_code, r.headers["content-type"].split(";")[0], r.text, dict(r.headers)

    def close(self):
        self.client.__exit__(None, None, None)


_django_ready = False


def django_setup(url):
    global _django_ready
    if _django_ready:
        return
    import django
    from django.conf import settings
    def database(conninfo):
        c = conninfo_to_dict(conninfo)
        return {"ENGINE": "django.db.backends.postgresql", "NAME": c.get("dbname"), "USER": c.get("user"),
                "HOST": c.get("host"), "PORT": c.get("port"), "OPTIONS": {"connect_timeout": 1}}

    # "away": a server that is not there, for the outage test.
    settings.configure(
        DATABASES={"default": database(url), "away": database(AWAY)},
        ROOT_URLCONF=__name__ + "_django_urls", ALLOWED_HOSTS=["*"], USE_TZ=True, DEBUG=False,
        INSTALLED_APPS=["billing"],
    )
    django.setup()
    _django_ready = True


class Django:
    """webhook_view in Django's own transaction, through Django's test client."""
    name = "django"

    def __init__(self, url, failing: Trouble, retry_seconds=8.0):
        import sys
        import types

        django_setup(os.environ["DATABASE_URL"])
        using = "away" if url == AWAY else "default"
        from django.db import connections
        from django.test import Client
        from django.urls import clear_url_caches, path

        from pg_webhook_inbox.django import webhook_view

        def work(delivery):
            failing.before(delivery.event_id)
            with connections[using].cursor() as cur:
                cur.execute(INSERT, ("stripe", delivery.event_id, delivery.event_type, self.name))
            failing.after(delivery.event_id)
            return {"order": delivery.event_id}

        urls = types.ModuleType(__name__ + "_django_urls")
        urls.urlpatterns = [path("webhooks/<str:provider>", webhook_view(work, using=using,
                                                                          retry_seconds=retry_seconds))]
        sys.modules[urls.__name__] = urls
        clear_url_caches()
        self.client = Client()

    def send(self, provider, headers, body):
        r = self.client.post(f"/webhooks/{provider}", data=body, content_type=headers.get("Content-Type", ""),
                             headers={k: v for k, v in headers.items() if k != "Content-Type"})
        return r.status_code, r["Content-Type"].split(";")[0], r.content.decode(), dict(r.headers)

    def close(self):
        from django.db import connections
        connections.close_all()


class FlaskPsycopg:
    """A psycopg Handler behind Flask, through Flask's test client."""
    name = "flask"

    def __init__(self, url, failing: Trouble, retry_seconds=8.0):
        from flask import Flask

        from pg_webhook_inbox.flask import webhook_view

        self.pool = pool(url, timeout=1.0)
        app = Flask(__name__)
        app.add_url_rule("/webhooks/<provider>", methods=["POST"],
                         view_func=webhook_view(Handler(self.pool, retry_seconds=retry_seconds),
                                                psycopg_work(self.name, failing)))
        self.client = app.test_client()

    def send(self, provider, headers, body):
        r = self.client.post(f"/webhooks/{provider}", data=body, headers=headers)
        return r.status_code, r.mimetype, r.get_data(as_text=True), dict(r.headers)

    def close(self):
        self.pool.close()


class FlaskSqlAlchemy:
    """SQLAlchemy sessions (SessionHandler) behind Flask."""
    name = "sqlalchemy"

    def __init__(self, url, failing: Trouble, retry_seconds=8.0):
        from flask import Flask
        from sqlalchemy import create_engine, text
        from sqlalchemy.orm import sessionmaker

        from pg_webhook_inbox.flask import webhook_view
        from pg_webhook_inbox.sqlalchemy import SessionHandler

        self.engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1),
                                    pool_pre_ping=True, pool_timeout=1.0)
        insert = text("INSERT INTO orders (provider, event_id, event_type, handler) VALUES ('stripe', :e, :t, :h)")

        def work(session, delivery):
            failing.before(delivery.event_id)
            session.execute(insert, {"e": delivery.event_id, "t": delivery.event_type, "h": self.name})
            failing.after(delivery.event_id)
            return {"order": delivery.event_id}

        app = Flask(__name__)
        app.add_url_rule("/webhooks/<provider>", methods=["POST"],
                         view_func=webhook_view(SessionHandler(sessionmaker(self.engine), retry_seconds=retry_seconds), work))
        self.client = app.test_client()

    def send(self, provider, headers, body):
        r = self.client.post(f"/webhooks/{provider}", data=body, headers=headers)
        return r.status_code, r.mimetype, r.get_data(as_text=True), dict(r.headers)

    def close(self):
        self.engine.dispose()


ALL = [Direct, FastApi, Django, FlaskPsycopg, FlaskSqlAlchemy]
