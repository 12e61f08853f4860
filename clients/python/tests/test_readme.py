"""The README's ten-line handlers, run as they are printed: each verifies a
signed Stripe delivery, writes its row once, answers the redelivery as a
duplicate and refuses a forgery."""
import json
import pathlib
import re
import sys
import types

import psycopg
import pytest

import adapters
from conftest import new_run, stripe_event, stripe_headers

README = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()
SECTION = README.split("## A Stripe handler in ten lines", 1)[1].split("\n## ", 1)[0]
BLOCKS = re.findall(r"```python\n(.*?)```", SECTION, re.S)


def block(framework: str) -> str:
    (code,) = [b for b in BLOCKS if framework in b]
    assert len(code.strip().splitlines()) <= 12, "the README promises about ten lines"
    return code


def run_block(framework: str, module: types.ModuleType = None) -> types.ModuleType:
    """The README's block, run as a module of its own (frameworks find their
    root from the module's file)."""
    module = module or types.ModuleType(f"readme_{framework.lower()}")
    module.__file__ = str(pathlib.Path(__file__).resolve())
    sys.modules[module.__name__] = module
    exec(block(framework), module.__dict__)
    return module


def paid_rows(admin, event_id):
    with psycopg.connect(admin, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM invoices_paid WHERE event_id = %s", (event_id,)).fetchone()[0]


def exactly_once(post, admin):
    run = new_run()
    event = f"evt_{run}_readme"
    body = stripe_event(event, run)
    status, answer = post("/webhooks/stripe", stripe_headers(body), body)
    assert (status, answer["status"]) == (200, "claimed"), answer
    status, answer = post("/webhooks/stripe", stripe_headers(body), body)
    assert (status, answer["status"]) == (200, "duplicate"), answer
    status, answer = post("/webhooks/stripe", stripe_headers(body, "whsec_someone_else"), body)
    assert (status, answer["reason"]) == (401, "bad_signature"), answer
    assert paid_rows(admin, event) == 1


def test_fastapi(admin):
    from fastapi.testclient import TestClient
    readme = run_block("FastAPI")
    with TestClient(readme.app) as client:
        def post(path, headers, body):
            r = client.post(path, content=body, headers=headers)
            return r.status_code, r.json()
        exactly_once(post, admin)


def test_flask(admin):
    readme = run_block("Flask")
    client = readme.app.test_client()
    try:
        def post(path, headers, body):
            r = client.post(path, data=body, headers=headers)
            return r.status_code, json.loads(r.get_data())
        exactly_once(post, admin)
    finally:
        readme.pool.close()


def test_django(admin, database_url):
    adapters.django_setup(database_url)
    from django.test import Client
    from django.urls import clear_url_caches
    run_block("django", types.ModuleType(adapters.__name__ + "_django_urls"))  # the ROOT_URLCONF
    clear_url_caches()
    client = Client()

    def post(path, headers, body):
        r = client.post(path, data=body, content_type="application/json",
                        headers={k: v for k, v in headers.items() if k != "Content-Type"})
        return r.status_code, json.loads(r.content)
    exactly_once(post, admin)
