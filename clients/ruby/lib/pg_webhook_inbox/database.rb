# frozen_string_literal: true

require "pg"

module PgWebhookInbox
  # A small pool of connections of the pg gem: each transaction takes one,
  # BEGIN … COMMIT, and gives it back; one a lost connection broke is
  # closed, not pooled again. Opened from a conninfo string, or by the
  # application's own callable returning a PG::Connection (its settings).
  # No statement is named (exec_params only): behind a transaction pooler
  # (PgBouncer in transaction mode, Supavisor's or Neon's pooled endpoint)
  # it works as it does on the server.
  class Database
    def initialize(source, size: 5, checkout_timeout: 1.0)
      @connect = source.respond_to?(:call) ? source : -> { PG.connect(source) }
      @size, @checkout_timeout = size, checkout_timeout
      @idle = []
      @open = 0
      @lock = Mutex.new
      @available = ConditionVariable.new
    end

    # Runs the block with a PG::Connection in a transaction of its own.
    def transaction
      conn = checkout
      broken = false
      begin
        conn.exec("BEGIN")
        result = yield conn
        conn.exec("COMMIT")
        result
      rescue Exception => e # rubocop:disable Lint/RescueException - rolled back, then raised again
        broken = Outage.outage?(e) || conn.status != PG::CONNECTION_OK
        begin
          conn.exec("ROLLBACK") unless broken
        rescue PG::Error
          broken = true
        end
        raise
      ensure
        checkin(conn, broken)
      end
    end

    # Nothing to do: a broken connection was already dropped.
    def after_outage; end

    def close
      @lock.synchronize do
        @idle.each(&:close)
        @open -= @idle.size
        @idle.clear
      end
    end

    private

    def checkout
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + @checkout_timeout
      @lock.synchronize do
        loop do
          return @idle.pop unless @idle.empty?
          break if @open < @size

          left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
          raise PG::ConnectionBad, "no connection free in the pool after #{@checkout_timeout} s" if left <= 0

          @available.wait(@lock, left)
        end
        @open += 1
      end
      begin
        @connect.call
      rescue StandardError
        @lock.synchronize { @open -= 1; @available.signal }
        raise
      end
    end

    def checkin(conn, broken)
      @lock.synchronize do
        if broken
          conn.close unless conn.finished?
          @open -= 1
        else
          @idle.push(conn)
        end
        @available.signal
      end
    end
  end
end
