"""The web console in a real browser.

A database seeded with a few thousand deliveries across providers (some
dead, some filtered, a payload carrying a <script>, a header carrying an
onerror attribute); consoles connected as an operator, a read-only viewer
and an application role; Debian's chromium, headless, driven through
chromium-driver by the W3C WebDriver protocol (spoken here with the
standard library). Every screen loads and is photographed; a dead letter
is requeued through the confirmation and the database shows it ready; a
replay's dry run shows the count the SQL function returns; the hostile
payload and header render as inert text; a form posted without its token
is refused; the viewer is refused the action and nothing changes; the
application role sees nothing.

Run by .ci/console-test under .ci/pg-temp (PGHOST and friends set).
"""

import base64
import json
import os
import re
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

BIN = os.environ["CONSOLE_BIN"]
OPS_PORT, VIEW_PORT, APP_PORT, DRIVER_PORT, AUTH_PORT = (int(p) for p in os.environ["CONSOLE_PORTS"].split(","))
SHOTS = os.environ["CONSOLE_SCREENSHOTS"]
DB = "console"
PWNED = "pwned"


def psql(sql, db=DB):
    out = subprocess.run(
        ["psql", "-X", "-At", "-v", "ON_ERROR_STOP=1", "-d", db, "-c", sql],
        check=True, capture_output=True, text=True,
    )
    return out.stdout.strip()


def github_headers(delivery, event, body, extra=None):
    """Headers of a GitHub delivery of `body`, signed with the seed's secret."""
    import hmac
    import hashlib
    sig = hmac.new(b"console-github", body.encode(), hashlib.sha256).hexdigest()
    headers = {"X-GitHub-Delivery": delivery, "X-GitHub-Event": event, "X-Hub-Signature-256": "sha256=" + sig}
    headers.update(extra or {})
    return headers


def receive(provider, headers, body):
    return psql(
        "SELECT status FROM webhook_receive(%s, %s::jsonb, convert_to(%s, 'UTF8'))"
        % (quote(provider), quote(json.dumps(headers)), quote(body))
    )


def quote(value):
    return "'" + value.replace("'", "''") + "'"


def seed():
    psql("DROP DATABASE IF EXISTS console", db="postgres")
    psql("CREATE DATABASE console", db="postgres")
    psql("""
        CREATE EXTENSION pg_webhook_inbox;
        SELECT webhook_create_partitions();
        SELECT webhook_register_provider('stripe', secret => 'whsec_console', inbox => true,
                                         consumers => '{billing,analytics}');
        SELECT webhook_register_provider('github', secret => 'console-github', inbox => false);
        SELECT webhook_register_provider('clerk', secret => 'whsec_Y29uc29sZS1jbGVyay1rZXktMDEyMzQ1Njc4OQ==',
                                         inbox => true);
        SELECT count(*) FROM generate_series(1, 2000) g,
               webhook_enqueue('stripe', 'evt_' || g, CASE WHEN g % 4 = 0 THEN 'invoice.paid' ELSE 'charge.succeeded' END,
                               jsonb_build_object('id', 'evt_' || g, 'amount', g));
        SELECT count(*) FROM generate_series(1, 800) g,
               webhook_enqueue('clerk', 'msg_' || g, 'user.created', jsonb_build_object('user', g));
        SELECT count(*) FROM generate_series(1, 500) g,
               LATERAL (SELECT id FROM webhook_claim('github', 'gh_' || g, 'push', jsonb_build_object('n', g), NULL,
                                                     complete_on_commit => true)) c;
    """)
    # Workers: billing processes most Stripe events, fails some for good.
    psql("""
        SELECT count(*) FROM (SELECT webhook_complete(id) FROM webhook_next(1000, 'billing', 'stripe')) x;
        SELECT count(*) FROM (SELECT webhook_complete(id) FROM webhook_next(1000, 'analytics', 'stripe')) x;
        SELECT count(*) FROM (SELECT webhook_complete(id) FROM webhook_next(500, 'default', 'clerk')) x;
    """)
    psql("""
        SELECT count(*) FROM (SELECT webhook_fail(id, 'ledger answered 500', permanent => true)
                                FROM webhook_next(25, 'billing', 'stripe')) x;
    """)
    # Filtered: GitHub takes only opened pull requests.
    psql("""SELECT webhook_set_filter('github', payload_path => '$.action == "opened"')""")
    for n in range(40):
        body = json.dumps({"action": "closed" if n % 2 else "opened", "number": n})
        receive("github", github_headers(f"gh-pr-{n}", "pull_request", body), body)
    # Hostile: a payload carrying a script, a header carrying markup.
    hostile = '{"note": "<script>document.title=\\"%s\\"</script>", "id": "evt_hostile"}' % PWNED
    psql("SELECT webhook_enqueue('stripe', 'evt_hostile', 'invoice.paid', %s::jsonb)" % quote(hostile))
    body = json.dumps({"action": "opened", "number": 999})
    status = receive("github", github_headers(
        "gh-hostile", "pull_request", body,
        {"X-Note": '"><img src=x onerror="document.title=\'%s\'">' % PWNED}), body)
    assert status == "claimed", status
    psql("SELECT webhook_metrics_rollup(); SELECT webhook_alerts_evaluate();")
    for role, grant in [("console_ops", "operator"), ("console_view", "viewer"), ("console_app", "app")]:
        psql(f"DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN; SELECT webhook_grant_{grant}('{role}')")


def start_console(role, port, env=None):
    conninfo = f"host={os.environ['PGHOST']} port={os.environ['PGPORT']} dbname={DB} user={role}"
    proc = subprocess.Popen([BIN, "--listen", f"127.0.0.1:{port}", "--database", conninfo],
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
    wait_for(f"http://127.0.0.1:{port}/style.css", proc, ok_codes=(200, 401))
    return proc


def wait_for(url, proc=None, ok_codes=(200,)):
    for _ in range(200):
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"{url}: exited: {proc.stderr.read()}")
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except urllib.error.HTTPError as err:
            if err.code in ok_codes:
                return
            raise
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.1)
    raise SystemExit(f"{url} never answered")


class Browser:
    """Just enough of WebDriver: navigate, read, find, click, type, photograph."""

    def __init__(self, port):
        self.base = f"http://127.0.0.1:{port}"
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
            "binary": "/usr/bin/chromium",
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1400,1000"]}}}}
        self.session = self.call("POST", "/session", caps)["sessionId"]

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            return json.load(resp)["value"]

    def s(self, path, method="GET", body=None):
        return self.call(method, f"/session/{self.session}{path}", body)

    def go(self, url):
        self.s("/url", "POST", {"url": url})

    def title(self):
        return self.s("/title")

    def text(self, css):
        return self.s(f"/element/{self.find(css)}/text")

    def find(self, css):
        # A click that submits a form returns before the next page is
        # there: wait for the element (up to 10 s) rather than read the
        # page being left.
        for _ in range(100):
            try:
                found = self.s("/element", "POST", {"using": "css selector", "value": css})
                return next(iter(found.values()))
            except urllib.error.HTTPError as err:
                if err.code != 404:
                    raise
                time.sleep(0.1)
        raise SystemExit(f"console: FAILED: no element {css} on {self.s('/url')}")

    def exists(self, css):
        return len(self.s("/elements", "POST", {"using": "css selector", "value": css})) > 0

    def click(self, css):
        self.s(f"/element/{self.find(css)}/click", "POST", {})

    def type(self, css, value):
        self.s(f"/element/{self.find(css)}/value", "POST", {"text": value})

    def source(self):
        return self.s("/source")

    def run(self, script):
        return self.s("/execute/sync", "POST", {"script": script, "args": []})

    def shot(self, name):
        os.makedirs(SHOTS, exist_ok=True)
        with open(os.path.join(SHOTS, name + ".png"), "wb") as f:
            f.write(base64.b64decode(self.s("/screenshot")))

    def quit(self):
        try:
            self.s("", "DELETE")
        except Exception:
            pass


def check(condition, what):
    if not condition:
        raise SystemExit("console: FAILED: " + what)
    print("console: " + what)


def main():
    seed()
    consoles = [start_console("console_ops", OPS_PORT), start_console("console_view", VIEW_PORT),
                start_console("console_app", APP_PORT),
                start_console("console_ops", AUTH_PORT,
                              {"WEBHOOK_CONSOLE_USER": "oncall", "WEBHOOK_CONSOLE_PASSWORD": "s3cret-pass"})]
    driver = subprocess.Popen(["chromedriver", f"--port={DRIVER_PORT}"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    browser = None
    try:
        wait_for(f"http://127.0.0.1:{DRIVER_PORT}/status")
        browser = Browser(DRIVER_PORT)
        ops = f"http://127.0.0.1:{OPS_PORT}"
        view = f"http://127.0.0.1:{VIEW_PORT}"
        app = f"http://127.0.0.1:{APP_PORT}"

        # Every screen loads, as the operator; a photograph of each.
        for name, path, heading in [("overview", "/", "Overview"), ("deliveries", "/deliveries", "Deliveries"),
                                    ("dead-letters", "/dead", "Dead letters"), ("replays", "/replays", "Replays"),
                                    ("providers", "/providers", "Providers"), ("alerts", "/alerts", "Alerts")]:
            browser.go(ops + path)
            check(browser.text("h1") == heading and not browser.exists("#refused"), f"{path} loads")
            browser.shot(name)
        browser.go(ops + "/")
        check(browser.exists("svg.chart rect"), "the overview draws the activity charts")
        check("whsec_console" not in browser.source(), "no secret on the overview")
        browser.go(ops + "/providers")
        source = browser.source()
        fingerprint = psql("SELECT fingerprint FROM webhook.secret_usage WHERE provider = 'stripe'")
        check(fingerprint in source and "whsec_console" not in source and "console-github" not in source,
              "providers show secrets by fingerprint only")

        # Deliveries: a filter, the detail page, the filtered ones.
        browser.go(ops + "/deliveries?provider=github&status=filtered")
        rows = browser.run("return document.querySelectorAll('tbody tr').length")
        check(rows == 20, f"the 20 filtered GitHub deliveries are listed ({rows})")
        browser.go(ops + "/deliveries?provider=stripe")
        check(browser.exists("a[href^='/deliveries?'][href*='before=']"), "a long list is paged")

        # The hostile payload and header: shown as text, nothing runs.
        hostile = psql("SELECT id FROM webhook.deliveries WHERE event_id = 'evt_hostile'")
        browser.go(f"{ops}/deliveries/{hostile}")
        browser.shot("hostile-payload")
        check(browser.title() != PWNED and "<script>" in browser.text("#payload"),
              "a payload's <script> is shown as text and does not run")
        check(browser.run("return document.querySelectorAll('main script').length") == 0,
              "no script element comes from a payload")
        header = psql("SELECT id FROM webhook.deliveries WHERE event_id = 'gh-hostile'")
        browser.go(f"{ops}/deliveries/{header}")
        browser.shot("hostile-header")
        check(browser.title() != PWNED and "onerror" in browser.text("#headers")
              and browser.run("return document.querySelectorAll('main img').length") == 0,
              "a header's markup is shown as text and makes no element")

        # A dead letter requeued through the confirmation.
        dead_before = int(psql("SELECT count(*) FROM webhook.inbox WHERE status = 'dead'"))
        browser.go(ops + "/dead")
        browser.click("td a[href^='/dead/confirm?']")
        browser.shot("dead-letter-confirm")
        plan = browser.text("#plan")
        event_id = plan.split("Requeue event ")[1].split(" of ")[0]
        browser.click("#confirm")
        check("Requeued" in browser.text("#notice"), "the requeue says so")
        status = psql(f"SELECT status FROM webhook.inbox WHERE event_id = {quote(event_id)} AND consumer = 'billing'")
        check(status == "ready", f"the requeued dead letter {event_id} is ready in the database")
        check(int(psql("SELECT count(*) FROM webhook.inbox WHERE status = 'dead'")) == dead_before - 1,
              "exactly one dead letter left the dead")

        # A replay's dry run shows what the SQL function counts; run it.
        expected = psql("SELECT events FROM webhook_replay('stripe', event_types => '{invoice.paid}')")
        browser.go(ops + "/replays/plan?provider=stripe&event_types=invoice.paid")
        browser.shot("replay-plan")
        check(browser.text("#count") == expected, f"the dry run shows the function's count ({expected})")
        browser.type("input[name=reason]", "console test")
        browser.click("#confirm")
        check("started" in browser.text("#notice"), "the replay starts")
        check(psql("SELECT events FROM webhook.replays WHERE reason = 'console test'") == expected,
              "the replay queued what the dry run counted")
        browser.shot("replays")

        # A form posted without its token: refused, nothing done.
        dead_now = psql("SELECT count(*) FROM webhook.inbox WHERE status = 'dead'")
        form = urllib.parse.urlencode({"provider": "stripe"}).encode()
        try:
            urllib.request.urlopen(urllib.request.Request(ops + "/dead/requeue", data=form), timeout=10)
            code = 200
        except urllib.error.HTTPError as err:
            code = err.code
        check(code == 403 and psql("SELECT count(*) FROM webhook.inbox WHERE status = 'dead'") == dead_now,
              "a form without its token is refused and changes nothing")
        # DNS rebinding: a page on another name that resolves to the
        # console's address reads the form token and posts. The console
        # answers no other Host, and takes no POST from another Origin.
        def status(url, data=None, headers=None):
            req = urllib.request.Request(url, data=data, headers=headers or {})
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    return resp.status, resp.read().decode()
            except urllib.error.HTTPError as err:
                return err.code, err.read().decode()
        host = f"127.0.0.1:{OPS_PORT}"
        code, page = status(ops + "/providers")
        token = re.search(r'name="csrf" value="([0-9a-f]+)"', page).group(1)
        rebound = {"Host": f"attacker.example:{OPS_PORT}"}
        check(status(ops + "/", headers=rebound)[0] == 421, "a request for another host name is refused (421)")
        requeue_all = urllib.parse.urlencode({"csrf": token, "provider": "stripe"}).encode()
        check(status(ops + "/dead/requeue", requeue_all, rebound)[0] == 421
              and psql("SELECT count(*) FROM webhook.inbox WHERE status = 'dead'") == dead_now,
              "a rebound page's post with the token is refused and changes nothing")
        for origin in (f"http://attacker.example:{OPS_PORT}", "null"):
            check(status(ops + "/dead/requeue", requeue_all, {"Host": host, "Origin": origin})[0] == 403
                  and psql("SELECT count(*) FROM webhook.inbox WHERE status = 'dead'") == dead_now,
                  f"a post from origin {origin} is refused and changes nothing")
        check(status(ops + "/dead/requeue", requeue_all,
                     {"Host": host, "Origin": f"http://{host}", "Sec-Fetch-Site": "cross-site"})[0] == 403,
              "a cross-site post is refused")
        # Notices are the console's own: a link cannot put words on a page.
        forged = "Your session expired: call +1 555 0100"
        code, page = status(ops + "/?" + urllib.parse.urlencode({"notice": forged}))
        check(code == 200 and "555 0100" not in page and 'id="notice"' not in page,
              "a notice the console did not make is not shown")

        # A burst at a slow page holds at most the console's connections
        # (4 by default), never one per request: the viewer's console, the
        # only one connected as its role.
        import threading
        answers, peak = [], [0]
        def hit():
            answers.append(status(view + "/deliveries?path=" + urllib.parse.quote("$.x like_regex \"(a+)+b\""))[0])
        def watch():
            while len(answers) < 40:
                n = int(psql("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'webhook-console'"
                             " AND usename = 'console_view'", db="postgres"))
                peak[0] = max(peak[0], n)
                time.sleep(0.05)
        threads = [threading.Thread(target=hit) for _ in range(40)]
        watcher = threading.Thread(target=watch)
        watcher.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        watcher.join()
        check(peak[0] <= 4, f"40 requests at once held {peak[0]} connections (at most 4)")
        check(all(a in (200, 503) for a in answers) and 200 in answers,
              f"each was answered, or turned away as busy: {sorted(set(answers))}")

        with urllib.request.urlopen(ops + "/", timeout=10) as resp:
            csp = resp.headers.get("Content-Security-Policy", "")
        check("script-src" not in csp and "default-src 'none'" in csp, "pages forbid every script")

        # An alert acknowledged.
        browser.go(ops + "/alerts")
        browser.click("form[action='/alerts/acknowledge'] button")
        check("acknowledged" in browser.text("#notice")
              and psql("SELECT count(*) FROM webhook.alerts WHERE status = 'acknowledged' "
                       "AND acknowledged_by = 'console_ops'") == "1",
              "an alert is acknowledged, as the console's role")

        # Basic authentication, when configured: nothing without it.
        auth = f"http://127.0.0.1:{AUTH_PORT}/"
        for credentials, expected in [(None, 401), ("oncall:wrong", 401), ("oncall:s3cret-pass", 200)]:
            req = urllib.request.Request(auth)
            if credentials:
                req.add_header("Authorization", "Basic " + base64.b64encode(credentials.encode()).decode())
            try:
                code = urllib.request.urlopen(req, timeout=10).status
            except urllib.error.HTTPError as err:
                code = err.code
            check(code == expected, f"basic authentication: {credentials or 'none'} -> {code}")

        # On a Unix socket: reachable by the console's user and group
        # only (0660), answered for localhost, not for another Host.
        socket_path = os.path.join(tempfile.mkdtemp(prefix="console-"), "console.sock")
        conninfo = f"host={os.environ['PGHOST']} port={os.environ['PGPORT']} dbname={DB} user=console_view"
        on_socket = subprocess.Popen([BIN, "--listen", f"unix:{socket_path}", "--database", conninfo],
                                     stderr=subprocess.PIPE, text=True)
        consoles.append(on_socket)

        def through_socket(host):
            for _ in range(200):
                try:
                    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    sock.connect(socket_path)
                    break
                except (FileNotFoundError, ConnectionRefusedError):
                    if on_socket.poll() is not None:
                        raise SystemExit(f"the console on a socket exited: {on_socket.stderr.read()}")
                    time.sleep(0.1)
            with sock:
                sock.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
                answer = b""
                while chunk := sock.recv(65536):
                    answer += chunk
            return int(answer.split(b" ", 2)[1]), answer

        code, page = through_socket("localhost")
        check(code == 200 and b"Overview" in page, f"the console answers on a Unix socket ({code})")
        check(stat.S_IMODE(os.stat(socket_path).st_mode) == 0o660, "its socket is the user's and group's only")
        code, _ = through_socket("evil.example")
        check(code != 200, f"another Host through the socket is refused ({code})")

        # The viewer sees everything but acts on nothing.
        browser.go(view + "/dead")
        check(browser.text("h1") == "Dead letters", "the viewer sees the dead letters")
        browser.click("td a[href^='/dead/confirm?']")
        browser.click("#confirm")
        browser.shot("viewer-refused")
        check("42501" in browser.text("#refused"), "the viewer's requeue is refused by the database (42501)")
        check(psql("SELECT count(*) FROM webhook.inbox WHERE status = 'dead'") == dead_now,
              "and nothing changed")

        # The application role: nothing to show.
        browser.go(app + "/")
        check("42501" in browser.text("#refused"), "the application role is refused the overview")
        browser.go(app + "/deliveries")
        check("42501" in browser.text("#refused"), "and the archive")
    finally:
        if browser is not None:
            browser.quit()
        driver.terminate()
        for c in consoles:
            c.terminate()
    print("console: every check passed; screenshots in " + SHOTS)


if __name__ == "__main__":
    main()
