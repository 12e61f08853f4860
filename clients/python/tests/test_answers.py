"""The table of answers (clients/testing/cases.json), through every adapter,
and what surrounds it: a live attempt elsewhere, a database restarted
in the middle of the work, a database that stays away, a provider nobody
registered."""
import io
import json
import time

import psycopg
import pytest

import adapters
from conftest import CASES, delivery, expected, new_run, orders, restart_server, stripe_event, stripe_headers
from pg_webhook_inbox import flow
from pg_webhook_inbox.errors import PayloadTooLarge
from pg_webhook_inbox.psycopg import receive


@pytest.fixture(params=adapters.ALL, ids=lambda a: a.name)
def adapter(request, database_url):
    trouble = adapters.Trouble()
    a = request.param(database_url, trouble)
    a.failing = trouble
    yield a
    a.close()


def test_every_answer_of_the_table(adapter, admin):
    run = new_run()
    for case in CASES:
        if case.get("fail"):
            adapter.failing.fail.add(case["event"].replace("{run}", run))
        before = orders(admin, run, adapter.name)
        status, content_type, body, _ = adapter.send(*delivery(case, run))
        adapter.failing.fail.clear()
        want = expected(case, run)
        assert status == want["http"], (case["name"], body)
        assert orders(admin, run, adapter.name) - before == want["work"], case["name"]
        if "body" in want:
            assert body == want["body"], case["name"]
            assert content_type == want["content_type"], case["name"]
            continue
        answer = json.loads(body)
        assert answer["status"] == want["status"], (case["name"], answer)
        if "keys" in want:
            assert sorted(answer) == sorted(want["keys"]), (case["name"], answer)
        if "reason" in want:
            assert answer["reason"] == want["reason"], (case["name"], answer)
        if "result" in want:
            assert answer["result"] == want["result"], (case["name"], answer)


def test_a_live_attempt_elsewhere_is_answered_409_until_it_ends(adapter, database_url, admin):
    run = new_run()
    body = stripe_event(f"evt_{run}_live", run)
    with psycopg.connect(database_url) as holder:
        held = receive(holder, "stripe", stripe_headers(body), body, complete_on_commit=True)
        assert held.claimed
        status, _, answer, _ = adapter.send("stripe", stripe_headers(body), body)
        assert (status, json.loads(answer)["status"]) == (409, "in_progress")
        holder.rollback()  # the live attempt dies: its claim goes with it
    status, _, answer, _ = adapter.send("stripe", stripe_headers(body), body)
    assert (status, json.loads(answer)["status"]) == (200, "claimed")
    assert orders(admin, run, adapter.name) == 1


def test_a_restart_in_the_middle_of_the_work_is_retried_and_done_once(adapter, admin):
    """The server goes down while the work runs: the delivery's transaction
    is lost with its connection, the adapter tries the whole delivery again
    on a new one, and the event is done exactly once."""
    warm = new_run()
    adapter.send(*delivery(CASES[0], warm))  # a pooled connection, as in a running service
    run = new_run()
    body = stripe_event(f"evt_{run}_restart", run)
    adapter.failing.restart.add(f"evt_{run}_restart")
    status, _, answer, _ = adapter.send("stripe", stripe_headers(body), body)
    assert not adapter.failing.restart, "the restart did not happen inside the work"
    assert (status, json.loads(answer)["status"]) == (200, "claimed"), answer
    assert orders(admin, run, adapter.name) == 1
    status, _, answer, _ = adapter.send("stripe", stripe_headers(body), body)
    assert (status, json.loads(answer)["status"]) == (200, "duplicate"), answer
    assert orders(admin, run, adapter.name) == 1


@pytest.mark.parametrize("cls", adapters.ALL, ids=lambda a: a.name)
def test_a_database_that_stays_away_is_answered_503_with_retry_after(cls):
    """Nothing can be stored: 503 and Retry-After, once retry_seconds have
    passed, never a 500 (GitHub would not send it again)."""
    a = cls(adapters.AWAY, adapters.Trouble(), retry_seconds=1.0)
    try:
        started = time.monotonic()
        body = stripe_event("evt_away", "away")
        status, _, answer, headers = a.send("stripe", stripe_headers(body), body)
        assert (status, json.loads(answer)) == (503, {"status": "unavailable"})
        assert {k.lower(): v for k, v in headers.items()}["retry-after"] == "30"
        assert time.monotonic() - started < 6
    finally:
        a.close()


def test_an_outage_is_answered_within_retry_seconds_whatever_the_pool_would_wait():
    """psycopg_pool waits 30 s for a connection by default, longer than
    GitHub waits for an answer: the handlers ask a pool for a connection
    for no longer than their retry_seconds leave."""
    import asyncio

    from psycopg_pool import AsyncConnectionPool, ConnectionPool

    from pg_webhook_inbox.psycopg import AsyncHandler, Handler

    body = stripe_event("evt_away_pool", "away")
    pool = ConnectionPool(adapters.AWAY, min_size=1, max_size=2, open=True)  # its own timeout: 30 s
    try:
        started = time.monotonic()
        answer = Handler(pool, retry_seconds=2.0)("stripe", stripe_headers(body), body, lambda conn, d: None)
        assert (answer.status, json.loads(answer.body)) == (503, {"status": "unavailable"})
        assert time.monotonic() - started < 4
    finally:
        pool.close(timeout=1)

    async def through_the_async_handler():
        apool = AsyncConnectionPool(adapters.AWAY, min_size=1, max_size=2, open=False)
        try:
            started = time.monotonic()
            handler = AsyncHandler(apool, retry_seconds=2.0)

            async def work(conn, d):
                return None
            answer = await handler("stripe", stripe_headers(body), body, work)
            return answer, time.monotonic() - started
        finally:
            await apool.close(timeout=1)

    answer, took = asyncio.run(through_the_async_handler())
    assert (answer.status, json.loads(answer.body)) == (503, {"status": "unavailable"})
    assert took < 4, took


def test_only_an_outage_is_tried_again(database_url):
    """A statement timeout (57014) is no outage: answered 500 at once, its
    words logged, not sent; a closed connection's error is one."""
    from psycopg_pool import ConnectionPool

    from pg_webhook_inbox.errors import connection_lost
    from pg_webhook_inbox.psycopg import Handler

    with ConnectionPool(database_url, min_size=1, max_size=1, open=True,
                        kwargs={"options": "-c statement_timeout=1"}) as slow:
        run = new_run()
        body = stripe_event(f"evt_{run}_timeout", run)
        started = time.monotonic()

        def work(conn, delivery):
            conn.execute("SELECT pg_sleep(0.1)")
        answer = Handler(slow, retry_seconds=5.0)("stripe", stripe_headers(body), body, work)
        assert time.monotonic() - started < 2, "tried again"
        assert answer.status in (500,), answer
        assert "57014" not in answer.body and "statement timeout" not in answer.body, answer.body
    try:
        psycopg.connect(adapters.AWAY)
    except psycopg.OperationalError as exc:
        assert connection_lost(exc)
    with psycopg.connect(database_url) as conn:
        try:
            conn.execute("SET statement_timeout = 1; SELECT pg_sleep(0.1)")
        except psycopg.errors.QueryCanceled as exc:
            assert not connection_lost(exc)


def test_a_header_sent_twice_reaches_the_extension_as_in_every_other_adapter(database_url):
    """Starlette keeps each copy of a header, where WSGI servers, Node and
    Rack join them: every adapter passes them joined with ", ", so that
    the extension decides, alike whatever the framework."""
    from starlette.datastructures import Headers

    from pg_webhook_inbox.flow import headers_json

    both = Headers(raw=[(b"stripe-signature", b"t=1,v1=a"), (b"stripe-signature", b"t=1,v1=b"), (b"x-a", b"y")])
    assert json.loads(headers_json(both)) == {"stripe-signature": "t=1,v1=a, t=1,v1=b", "x-a": "y"}
    run = new_run()
    answers = []
    fastapi, direct = adapters.FastApi(database_url, adapters.Trouble()), adapters.Direct(database_url, adapters.Trouble())
    try:
        for order in ("forged first", "genuine first"):
            pair = []
            for via in ("fastapi", "joined"):
                body = stripe_event(f"evt_{run}_{order[0]}_{via}", run)
                genuine = stripe_headers(body)["Stripe-Signature"]
                forged = stripe_headers(body, "whsec_someone_else")["Stripe-Signature"]
                copies = [forged, genuine] if order == "forged first" else [genuine, forged]
                if via == "fastapi":
                    r = fastapi.client.post("/webhooks/stripe", content=body,
                                            headers=[("Content-Type", "application/json")]
                                            + [("Stripe-Signature", c) for c in copies])
                    pair.append((r.status_code, json.loads(r.text)["status"]))
                else:
                    status, _, text, _ = direct.send("stripe", {"Content-Type": "application/json",
                                                                "Stripe-Signature": ", ".join(copies)}, body)
                    pair.append((status, json.loads(text)["status"]))
            assert pair[0] == pair[1], (order, pair)
            answers.append(pair[0])
    finally:
        fastapi.close()
        direct.close()
    assert answers, answers


def test_a_streamed_body_past_the_bound_is_answered_413(database_url):
    """Without Content-Length, as a chunked request arrives: the ASGI reader
    stops past the bound; the WSGI one reads no more than one byte past it."""
    chunk = b"x" * 65536
    app = adapters.FastApi(database_url, adapters.Trouble())
    try:
        r = app.client.post("/webhooks/stripe", content=(chunk for _ in range(161)),
                            headers={"Content-Type": "application/json"})
    finally:
        app.close()
    assert (r.status_code, r.json()) == (413, {"status": "too_large"})
    stream = io.BytesIO(b"x" * (flow.MAX_BODY + 65536))
    with pytest.raises(PayloadTooLarge):
        flow.read_body(None, stream.read)
    assert stream.tell() == flow.MAX_BODY + 1


def test_a_provider_nobody_registered_is_answered_404(adapter):
    body = stripe_event("evt_nobody", "nobody")
    status, _, answer, _ = adapter.send("nobody", stripe_headers(body), body)
    assert (status, json.loads(answer)["status"]) == (404, "unknown_provider")


def test_retrying_puts_code_that_opens_its_own_connection_under_the_outage_rule(database_url, admin):
    """A two-phase claim made on a connection of its own: tried again while
    the database is away, 503 once retry_seconds have passed; an answer
    once it is back, and the attempts that failed stored nothing."""
    from pg_webhook_inbox.psycopg import retrying

    run = new_run()
    body = stripe_event(f"evt_{run}_two_phase", run)
    tries = []

    def claim(conninfo):
        tries.append(conninfo)
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=2) as conn:
            return receive(conn, "stripe", stripe_headers(body), body, inbox=False, lease="30 seconds").answer()

    started = time.monotonic()
    answer = retrying(lambda: claim(adapters.AWAY), retry_seconds=1.0)
    assert (answer.status, json.loads(answer.body)) == (503, {"status": "unavailable"})
    assert answer.headers["Retry-After"] == "30"
    assert len(tries) > 1, "the database away was not tried again"
    assert time.monotonic() - started < 6

    # Away for the first two attempts, then back.
    tries.clear()
    answer = retrying(lambda: claim(adapters.AWAY if len(tries) < 2 else database_url), retry_seconds=5.0)
    assert (answer.status, json.loads(answer.body)["status"]) == (200, "claimed"), answer
    assert len(tries) == 3
    with psycopg.connect(admin) as conn:
        states = conn.execute("SELECT status::text FROM webhook.events WHERE provider = 'stripe' AND event_id = %s",
                              (f"evt_{run}_two_phase",)).fetchall()
    assert states == [("processing",)], "one claim, held by its lease"


def test_every_combination_of_optional_arguments_binds_and_means_what_it_says(database_url, admin):
    """receive names only the optional arguments a delivery sets: one
    statement for each combination, each bound against the server here."""
    import itertools

    run = new_run()
    with psycopg.connect(database_url) as conn:
        for i, (lease, inbox, url, coc) in enumerate(itertools.product((True, False), repeat=4)):
            event_id = f"evt_{run}_call_{i}"
            body = stripe_event(event_id, run)
            options = dict(complete_on_commit=coc, lease="7 seconds" if lease else None,  # the default: 5 minutes
                           inbox=False if inbox else None,
                           url="https://hooks.example.com/webhooks/stripe" if url else None)
            if lease and coc:  # a lease means two phases: refused, with its own SQLSTATE
                with pytest.raises(psycopg.errors.InvalidParameterValue), conn.transaction():
                    receive(conn, "stripe", stripe_headers(body), body, **options)
                continue
            with conn.transaction():
                delivery = receive(conn, "stripe", stripe_headers(body), body, **options)
                assert (delivery.status.value, delivery.http_status) == ("claimed", 200), options
            with psycopg.connect(admin) as a:
                state, short = a.execute(
                    "SELECT status::text, lease_expires_at - now() < interval '10 seconds' FROM webhook.events "
                    "WHERE provider = 'stripe' AND event_id = %s", (event_id,)).fetchone()
            assert state == ("processed" if coc else "processing"), options
            if not coc:
                assert short is lease, f"the lease asked for: {options}"
        body = stripe_event(f"evt_{run}_queued", run)
        with conn.transaction():
            assert receive(conn, "stripe", stripe_headers(body), body, inbox=True).status.value == "queued"
