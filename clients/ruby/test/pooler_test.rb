# frozen_string_literal: true

# Through PgBouncer in transaction mode (four server connections shared by
# every client), as on Supabase's or Neon's pooled connection string:
# providers delivering to the Handler, claimed and queued, workers
# draining the inbox, the pooler restarted twice under them. Each delivery
# answered 2xx is done exactly once; nothing fails on a statement the
# pooler moved; the workers are still running. And a worker keeps running
# through any error, not only an outage.

require "stringio"
require_relative "support"

class PoolerTest < Minitest::Test
  INSERT = "INSERT INTO orders (provider, event_id, event_type, handler) VALUES ($1, $2, $3, $4)"
  SENDERS = 6
  EACH = 30

  def done_once(run)
    Support.admin do |c|
      c.exec_params("SELECT event_id, count(*) AS n FROM orders WHERE event_id LIKE $1 GROUP BY 1", ["evt_#{run}_%"])
       .to_h { |r| [r["event_id"], r["n"].to_i] }
    end
  end

  def test_handler_and_workers_through_a_transaction_pooler
    run = Support.new_run
    database = PgWebhookInbox::Database.new(Support.pooler_url, size: 6)
    handler = PgWebhookInbox::Handler.new(database, logger: Logger.new(nil))
    workers = Array.new(2) do
      # A batch a restart took the connection of is leased until its lease
      # runs out: a short one, so that the test does not wait a minute.
      PgWebhookInbox::Worker.new(Support.pooler_url, listen: false, poll_seconds: 0.1, batch: 5,
                                                     lease: "5 seconds", logger: nil) do |event, conn|
        conn.exec_params(INSERT, [event.provider, event.event_id, event.event_type, "pooled_worker"])
      end.tap { |w| w.backoff = PgWebhookInbox::Backoff.new(first: 0.1, last: 0.5) }
    end
    threads = workers.map { |w| Thread.new { w.run } }
    answers = Hash.new(0)
    acknowledged = []
    lock = Mutex.new
    senders = Array.new(SENDERS) do |s|
      Thread.new do
        EACH.times do |i|
          event_id = "evt_#{run}_#{s}_#{i}"
          name = i.odd? ? "stripe" : "stripe_inbox"
          deadline = Time.now + 60
          loop do
            raise "#{event_id} never acknowledged" if Time.now > deadline

            body = Support.stripe_event(event_id, run)
            answer = handler.call(name, Support.stripe_headers(body), body) do |delivery, conn|
              conn.exec_params(INSERT, [name, delivery.event_id, delivery.event_type, "pooled"])
              nil
            end
            lock.synchronize { answers[answer.status] += 1 }
            break if (200..299).cover?(answer.status)

            sleep 0.05
          end
          lock.synchronize { acknowledged << event_id }
        end
      end
    end
    after = lambda do |n|
      deadline = Time.now + 60
      sleep 0.02 while lock.synchronize { acknowledged.size } < n && Time.now < deadline
    end
    after.call(40)
    Support.restart_pooler(0)
    after.call(100)
    Support.restart_pooler(0.3)
    senders.each(&:join)
    deadline = Time.now + 60
    sleep 0.1 while done_once(run).size < SENDERS * EACH && Time.now < deadline
    assert threads.all?(&:alive?), "the workers still running"
    workers.each(&:stop)
    threads.each { |t| t.join(10) }
    database.close
    done = done_once(run)
    puts "through the pooler: answers #{answers}"
    assert_equal acknowledged.sort, done.keys.sort, "every acknowledged delivery done, nothing else"
    assert done.values.all?(1), done.reject { |_, n| n == 1 }.inspect
    assert_equal SENDERS * EACH, done.size
    assert (answers.keys - [200, 503]).empty?, answers.inspect
    workers.each do |w|
      assert w.last_error.nil? || PgWebhookInbox::Outage.outage?(w.last_error), w.last_error.inspect
    end
  end

  def test_a_worker_runs_through_any_error_until_stopped
    run = Support.new_run
    execute = lambda do |grant|
      Support.admin do |c|
        c.exec("SELECT oid::regprocedure::text AS f FROM pg_proc WHERE proname = 'webhook_next'").each do |r|
          c.exec(grant ? "GRANT EXECUTE ON FUNCTION #{r["f"]} TO clients_app" : "REVOKE EXECUTE ON FUNCTION #{r["f"]} FROM clients_app")
        end
      end
    end
    log = StringIO.new
    seen = []
    worker = PgWebhookInbox::Worker.new(Support::DATABASE_URL, listen: false, poll_seconds: 0.05, logger: Logger.new(log),
                                        on_error: lambda { |e|
                                          seen << e
                                          raise "the application's own callback failed too"
                                        }) do |event, conn|
      conn.exec_params(INSERT, [event.provider, event.event_id, event.event_type, "worker"])
    end
    worker.backoff = PgWebhookInbox::Backoff.new(first: 0.05, last: 0.2)
    execute.call(false)
    thread = nil
    begin
      thread = Thread.new { worker.run }
      deadline = Time.now + 20
      sleep 0.05 while worker.consecutive_errors < 3 && Time.now < deadline
      assert_operator worker.consecutive_errors, :>=, 3, worker.last_error.inspect
      assert thread.alive?
      assert_kind_of PG::InsufficientPrivilege, worker.last_error
    ensure
      execute.call(true)
    end
    conn = PG.connect(Support::DATABASE_URL)
    3.times do |i|
      body = Support.stripe_event("evt_#{run}_#{i}", run)
      assert_equal "queued", PgWebhookInbox.receive(conn, "stripe_inbox", Support.stripe_headers(body), body).status
    end
    conn.close
    deadline = Time.now + 30
    sleep 0.1 while done_once(run).size < 3 && Time.now < deadline
    assert_equal 3, done_once(run).size
    assert_equal 0, worker.consecutive_errors
    assert worker.errors >= 3 && seen.size >= 3
    worker.stop
    thread.join(10)
    refute thread.alive?
    assert_includes log.string, "an iteration failed"
  end
end
