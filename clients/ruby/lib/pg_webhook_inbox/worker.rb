# frozen_string_literal: true

require "json"
require "logger"
require "pg"

module PgWebhookInbox
  # One leased inbox event (a row of webhook_next); id is the lease.
  Event = Struct.new(:id, :provider, :event_id, :event_type, :payload, :attempts, :consumer, :traceparent, :origin,
                     keyword_init: true)

  # Reconnect waits: doubling from first to last, each drawn from the
  # upper half of its step, back to first once connected.
  class Backoff
    def initialize(first: 0.5, last: 30.0)
      @first, @last, @step = first, last, first
    end

    def connected! = @step = @first

    def next_wait
      wait = (@step / 2) + (rand * @step / 2)
      @step = [@step * 2, @last].min
      wait
    end
  end

  # The inbox's worker loop: lease a batch with webhook_next, work each
  # event in a savepoint, finish the batch with one webhook_complete_batch
  # in the same transaction as its work, so each event's work commits
  # exactly once.
  #
  # - A failing event is recorded with webhook_fail (retried after the
  #   backoff) and undoes only its own work.
  # - A lease that ran out and was taken over refuses the batch (55006):
  #   its work rolls back, and the events are finished one transaction each
  #   so the others still commit.
  # - stop (SIGTERM, SIGINT with handle_signals): the event in hand is
  #   finished, the rest of the batch handed back at once.
  # - Anything else that goes wrong in an iteration (the database away,
  #   any database error, a bug): logged (logger:, to standard error by
  #   default), counted (errors, consecutive_errors, last_error), passed to
  #   on_error, and the loop goes on after a wait of 0.5 s doubling to
  #   30 s, jittered. run never ends on its own, only by stop. What a lost
  #   connection held rolled back with it; its leases run out and are taken
  #   again.
  # - Idle: LISTEN webhook_inbox wakes it as soon as something is queued
  #   (needs a direct or session-pooled connection; listen: false polls).
  # - Connections: from a conninfo string, or from the application's own
  #   (a callable returning a PG::Connection). No statement is named
  #   (exec_params only), so behind a transaction pooler (PgBouncer in
  #   transaction mode, Supavisor's or Neon's pooled endpoint) it works
  #   with listen: false.
  #
  #   PgWebhookInbox::Worker.new(ENV["DATABASE_URL"]) { |event, conn| … }.handle_signals.run
  class Worker
    attr_accessor :backoff
    # For the application's metrics: a worker that keeps failing shows
    # here (and in the log), not as a process that is gone.
    attr_reader :errors, :consecutive_errors, :last_error

    def initialize(source, consumer: "default", provider: nil, batch: 10, lease: "1 minute", poll_seconds: 1.0,
                   listen: true, on_error: nil, logger: Logger.new($stderr, progname: "pg_webhook_inbox"), &work)
      raise ArgumentError, "the work is the block" unless work

      @connect = source.respond_to?(:call) ? source : -> { PG.connect(source) }
      @consumer, @provider, @batch, @lease = consumer, provider, batch, lease
      @poll_seconds, @listen, @on_error, @logger, @work = poll_seconds, listen, on_error, logger, work
      @stopping = false
      @backoff = Backoff.new
      @errors = @consecutive_errors = 0
      @last_error = nil
    end

    def stop = @stopping = true
    def stopping? = @stopping

    # Stop on SIGTERM and SIGINT.
    def handle_signals
      %w[TERM INT].each { |s| Signal.trap(s) { stop } }
      self
    end

    # Works until stop; nothing else ends it.
    def run
      until @stopping
        begin
          run_connected
        rescue StandardError => e
          failed(e)
          pause(@backoff.next_wait)
        end
      end
    end

    # One batch on conn; returns how many events were leased. The lease
    # commits on its own, so operators see the events leased.
    def run_once(conn)
      events = conn.exec_params(Statements::NEXT, [@batch, @consumer, @provider, @lease]).map do |r|
        Event.new(id: r["id"], provider: r["provider"], event_id: r["event_id"], event_type: r["event_type"],
                  payload: r["payload"] && JSON.parse(r["payload"]), attempts: r["attempts"].to_i,
                  consumer: r["consumer"], traceparent: r["traceparent"], origin: r["origin"])
      end
      begin
        finish(conn, events)
      rescue PG::Error => e
        raise unless Outage.sqlstate(e) == Statements::TAKEN_OVER

        events.each do |event|
          finish(conn, [event])
        rescue PG::Error => e
          raise unless Outage.sqlstate(e) == Statements::TAKEN_OVER # taken over: the new holder finishes it
        end
      end
      events.size
    end

    private

    def failed(error)
      @errors += 1
      @consecutive_errors += 1
      @last_error = error
      if Outage.outage?(error)
        @logger&.warn("inbox worker: the database is away (#{error.message.strip}); trying again")
      else
        @logger&.error("inbox worker: an iteration failed (error #{@consecutive_errors} in a row): " \
                       "#{error.class}: #{error.message.strip}; trying again")
      end
      @on_error&.call(error)
    rescue StandardError => e
      @logger&.error("inbox worker: on_error raised #{e.class}: #{e.message}")
    end

    def pause(seconds)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
      sleep 0.05 while !@stopping && Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
    end

    def run_connected
      conn = @connect.call
      listener = @listen ? @connect.call : nil
      listener&.exec(Statements::LISTEN)
      until @stopping
        leased = run_once(conn)
        @backoff.connected!
        @consecutive_errors = 0
        next unless leased.zero?

        listener ? idle(listener) : pause(@poll_seconds)
      end
    ensure
      conn&.close unless conn.nil? || conn.finished?
      listener&.close unless listener.nil? || listener.finished?
    end

    # Waits for a notification, the next poll, or stop.
    def idle(listener)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + @poll_seconds
      until @stopping || Process.clock_gettime(Process::CLOCK_MONOTONIC) >= deadline
        return if listener.wait_for_notify(0.1)
        raise PG::ConnectionBad, "the listening connection was lost" unless listener.status == PG::CONNECTION_OK
      end
    end

    def finish(conn, events)
      return if events.empty?

      conn.transaction do
        done = []
        events.each do |event|
          if @stopping
            conn.exec_params(Statements::HAND_BACK, [event.id])
            next
          end
          conn.exec(Statements::SAVEPOINT)
          begin
            @work.call(event, conn)
            conn.exec(Statements::RELEASE)
            done << event.id
          rescue StandardError => e
            raise if Outage.outage?(e)

            @on_error&.call(e)
            conn.exec(Statements::ROLLBACK_TO)
            conn.exec_params(Statements::FAIL, [event.id, e.message])
          end
        end
        conn.exec_params(Statements::COMPLETE_BATCH, [PG::TextEncoder::Array.new.encode(done)]) unless done.empty?
      end
    end
  end

  # The Idempotency-Key for a side effect of this event: the same on every attempt.
  def self.outbound_key(conn, lease, operation)
    conn.exec_params(Statements::OUTBOUND_KEY, [lease, operation]).getvalue(0, 0)
  end
end
