# frozen_string_literal: true

require "json"

module PgWebhookInbox
  # The one guarantee every adapter runs, written once.
  #
  # In the caller's transaction: webhook_receive verifies, deduplicates and
  # claims (complete_on_commit: the commit that saves the work completes
  # the event, a rollback undoes both). The work runs in a savepoint, so a
  # failure undoes the work, not the claim, and is recorded with
  # webhook_fail: the next delivery is a retry. The answer is handed back
  # for sending only once the transaction has committed.
  #
  # While the database is away (a restart, a failover, a pool with no
  # connection to give) the whole delivery is tried again for up to
  # retry_seconds (8: GitHub gives up after 10 s and never redelivers),
  # then answered 503 with Retry-After. Trying again is safe: what the
  # broken attempt wrote was rolled back with it, and one that did commit
  # is answered as a duplicate the second time. Never a 500 for a delivery
  # not stored. Only a database that is away is tried again: anything else
  # it answers would be answered the same.
  #
  # A body over max_body (10 MiB), or over the database's
  # webhook.max_payload_size, is answered 413. A database error never
  # reaches the response: it is logged (to logger, $stderr by default)
  # and answered 500.
  class Handler
    RETRY_SECONDS = 8.0
    MAX_BODY = 10 * 1024 * 1024

    attr_reader :database, :max_body

    # database: a Database or an ActiveRecordDatabase. public_url: the base
    # URL the providers are configured with, for the schemes that sign the
    # URL (Twilio, Square, HubSpot); never built from the Host header.
    def initialize(database, public_url: nil, retry_seconds: RETRY_SECONDS, inbox: nil, max_body: MAX_BODY,
                   logger: nil)
      @database, @public_url, @retry_seconds, @inbox = database, public_url, retry_seconds, inbox
      @max_body, @logger = max_body, logger
    end

    # One delivery: its provider, headers, raw body (read before anything
    # parsed it: the signature covers exactly those bytes) and the path and
    # query the provider called. The block is the work, given the delivery
    # and the PG::Connection of its transaction; what it returns (JSON-able,
    # optional) is stored and answered to duplicates.
    def call(provider, headers, body, path: "", &work)
      return Answer.too_large if body.bytesize > @max_body

      url = @public_url && (@public_url.sub(%r{/+\z}, "") + path)
      call = PgWebhookInbox.receive_call(provider, headers, body, url: url, inbox: @inbox, complete_on_commit: true)
      retrying(provider) { @database.transaction { |conn| deliver(conn, call, &work) } }
    end

    private

    def deliver(conn, call, &work)
      delivery = PgWebhookInbox.receive_with(conn, call)
      return delivery.answer unless delivery.owns_event?

      conn.exec(Statements::SAVEPOINT)
      begin
        result = work.call(delivery, conn)
        conn.exec_params(Statements::COMPLETE, [delivery.id, JSON.generate(result)]) unless result.nil?
        conn.exec(Statements::RELEASE)
      rescue StandardError => e
        raise if Outage.outage?(e)

        conn.exec(Statements::ROLLBACK_TO)
        conn.exec_params(Statements::FAIL, [delivery.id, e.message.empty? ? e.class.name : e.message])
        return Answer.failed
      end
      delivery.answer
    end

    def retrying(provider)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + @retry_seconds
      wait = 0.1
      begin
        yield
      rescue UnknownProvider
        Answer.unknown_provider(provider)
      rescue PayloadTooLarge
        Answer.too_large
      rescue StandardError => e
        return refused(e) unless Outage.outage?(e)

        @database.after_outage
        return Answer.unavailable if Process.clock_gettime(Process::CLOCK_MONOTONIC) + wait >= deadline

        sleep wait
        wait = [wait * 2, 1.0].min
        retry
      end
    end

    # Logged with the database's words, answered without them.
    def refused(error)
      message = "pg_webhook_inbox: webhook delivery failed: #{error.class}: #{error.message}"
      @logger ? @logger.error(message) : warn(message)
      Answer.error
    end
  end

  module_function

  # The request's headers as the JSON object webhook_receive reads: names
  # in lower case, a repeated header's values joined with ", ".
  def headers_json(headers)
    JSON.generate(headers.to_h { |k, v| [k.to_s.downcase, v.is_a?(Array) ? v.join(", ") : v.to_s] })
  end

  # webhook_receive's statement and arguments, [sql, params]: only the
  # optional arguments that are set, the body as bytes.
  def receive_call(provider, headers, body, url: nil, inbox: nil, complete_on_commit: false, lease: nil)
    raise TypeError, "body must be the raw request bytes, read before any parsing" unless body.is_a?(String)

    params = [provider, headers_json(headers), { value: body, type: 0, format: 1 }]
    params << lease unless lease.nil?
    params << inbox.to_s unless inbox.nil?
    params << url unless url.nil?
    params << complete_on_commit.to_s
    [Statements.receive(lease: !lease.nil?, inbox: !inbox.nil?, url: !url.nil?), params]
  end

  # webhook_receive in the caller's open transaction on conn (a
  # PG::Connection); the caller commits, then answers delivery.answer.
  def receive(conn, provider, headers, body, **options)
    receive_with(conn, receive_call(provider, headers, body, **options))
  end

  def receive_with(conn, (sql, params))
    Delivery.from_row(conn.exec_params(sql, params).first)
  rescue PG::Error => e
    raise UnknownProvider, params[0] if Outage.sqlstate(e) == Statements::UNKNOWN_PROVIDER
    raise PayloadTooLarge, e.message if Outage.sqlstate(e) == Statements::PAYLOAD_TOO_LARGE

    raise
  end
end
