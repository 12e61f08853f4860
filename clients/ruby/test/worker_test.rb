# frozen_string_literal: true

# The worker loop against the real inbox: a pool of workers, a failing
# event among others, a worker killed holding a batch, one stopped by
# SIGTERM, and the database restarted under them. Every test asserts that
# each event's work committed exactly once.

require_relative "support"

class WorkerTest < Minitest::Test
  INSERT = "INSERT INTO orders (provider, event_id, event_type, handler) VALUES ($1, $2, $3, 'worker')"
  PLAIN = ->(event, conn) { conn.exec_params(INSERT, [event.provider, event.event_id, event.event_type]) }

  def queue(run, n)
    conn = PG.connect(Support::DATABASE_URL)
    n.times do |i|
      body = Support.stripe_event("evt_#{run}_#{i}", run)
      assert_equal "queued", PgWebhookInbox.receive(conn, "stripe_inbox", Support.stripe_headers(body), body).status
    end
  ensure
    conn&.close
  end

  def once_each(run)
    counts = Support.admin do |c|
      c.exec_params("SELECT event_id, count(*) AS n FROM orders WHERE handler = 'worker' AND event_id LIKE $1 " \
                    "GROUP BY event_id", ["evt_#{run}_%"]).to_a
    end
    assert(counts.all? { |r| r["n"].to_i == 1 }, counts.reject { |r| r["n"].to_i == 1 }.inspect)
    counts.size
  end

  def wait_for(run, n, seconds = 30)
    deadline = Time.now + seconds
    until Time.now > deadline
      return if Support.orders("evt_#{run}_", "worker") >= n

      sleep 0.1
    end
    flunk "#{Support.orders("evt_#{run}_", "worker")} of #{n} events done after #{seconds} s"
  end

  def pool(n, work: PLAIN, **options)
    workers = Array.new(n) { PgWebhookInbox::Worker.new(Support::DATABASE_URL, **options, &work) }
    yield workers if block_given?
    threads = workers.map { |w| Thread.new { w.run } }
    [workers, threads]
  end

  def stop((workers, threads))
    workers.each(&:stop)
    threads.each { |t| assert t.join(10), "a worker did not stop" }
  end

  def child(seconds, lease)
    io = IO.popen([RbConfig.ruby, "-I", File.expand_path("../lib", __dir__), File.join(__dir__, "worker_process.rb"),
                   seconds.to_s, lease])
    line = io.gets
    assert_match(/\Aworking /, line)
    [io, line[/\Aworking (\S+)/, 1]]
  end

  def test_a_pool_of_workers_does_every_event_once
    run = Support.new_run
    queue(run, 60)
    p = pool(3, batch: 7)
    wait_for(run, 60)
    stop(p)
    assert_equal 60, once_each(run)
  end

  def test_a_failing_event_undoes_its_own_work_only
    run = Support.new_run
    queue(run, 10)
    errors = Queue.new
    work = lambda do |event, conn|
      PLAIN.call(event, conn)
      raise "the payment service said no" if event.event_id == "evt_#{run}_3"
    end
    p = pool(1, work: work, batch: 10, on_error: ->(e) { errors << e.message })
    wait_for(run, 9)
    sleep 0.3
    stop(p)
    assert_equal 9, once_each(run)
    assert_equal 0, Support.orders("evt_#{run}_3", "worker")
    assert_equal ["the payment service said no"], Array.new(errors.size) { errors.pop }
    row = Support.admin do |c|
      c.exec_params("SELECT i.attempts, i.last_error FROM webhook.inbox i JOIN webhook.deliveries a " \
                    "ON a.id = i.delivery_id WHERE a.event_id = $1", ["evt_#{run}_3"]).first
    end
    assert_equal({ "attempts" => "1", "last_error" => "the payment service said no" }, row)
  end

  def test_a_worker_killed_holding_a_batch_loses_nothing
    run = Support.new_run
    queue(run, 12)
    victim, = child(30, "2 seconds")
    Process.kill("KILL", victim.pid)
    Process.wait(victim.pid)
    p = pool(2, batch: 5, lease: "30 seconds")
    wait_for(run, 12)
    stop(p)
    assert_equal 12, once_each(run)
  end

  def test_sigterm_finishes_the_event_in_hand_and_hands_the_rest_back
    run = Support.new_run
    queue(run, 5)
    w, in_hand = child(0.5, "10 minutes")
    Process.kill("TERM", w.pid)
    _, status = Process.wait2(w.pid)
    assert status.success?
    # The event it named, which may be one another test left in the inbox:
    # the oldest ready events are leased first.
    assert_equal 1, Support.orders(in_hand, "worker"), "the event in hand (#{in_hand}) committed"
    # The rest were handed back at once, not after their ten-minute leases.
    p = pool(1, batch: 5)
    wait_for(run, 5, 10)
    stop(p)
    assert_equal 5, once_each(run)
  end

  def test_a_restart_under_the_workers_loses_nothing_and_repeats_nothing
    run = Support.new_run
    queue(run, 80)
    slowly = lambda do |event, conn|
      PLAIN.call(event, conn)
      sleep 0.02
    end
    p = pool(3, work: slowly, batch: 5, lease: "3 seconds") do |workers|
      workers.each { |w| w.backoff = PgWebhookInbox::Backoff.new(first: 0.1, last: 0.5) }
    end
    deadline = Time.now + 20
    sleep 0.05 while Support.orders("evt_#{run}_", "worker") < 10 && Time.now < deadline
    Support.restart_server
    wait_for(run, 80, 40)
    stop(p)
    assert_equal 80, once_each(run)
  end

  def test_backoff_doubles_with_jitter_and_starts_over_once_connected
    b = PgWebhookInbox::Backoff.new
    [0.5, 1, 2, 4, 8, 16, 30, 30].each do |step|
      w = b.next_wait
      assert w.between?(step / 2.0, step), "#{w} for #{step}"
    end
    b.connected!
    assert b.next_wait.between?(0.25, 0.5)
  end
end
