# frozen_string_literal: true

# The table of answers (clients/testing/cases.json), through every adapter,
# and what surrounds it: a live attempt elsewhere, a database restarted in
# the middle of the work, one that stays away, a provider nobody registered.

require_relative "adapters"

ADAPTERS.each do |adapter_class|
  Class.new(Minitest::Test) do
    define_method(:adapter) { @adapter ||= adapter_class.new(Support::DATABASE_URL) }
    define_method(:teardown) { @adapter&.close }

    define_method(:test_every_answer_of_the_table) do
      run = Support.new_run
      Support::CASES.each do |c|
        adapter.trouble.fail << Support.fill(c["event"], run) if c["fail"]
        before = Support.orders(run, adapter.name)
        r = adapter.send_delivery(*Support.delivery(c, run))
        adapter.trouble.fail.clear
        want = Support.expected(c, run)
        assert_equal want["http"], r.status, "#{c["name"]}: #{r.body}"
        assert_equal want["work"], Support.orders(run, adapter.name) - before, c["name"]
        if want["body"]
          assert_equal want["body"], r.body, c["name"]
          assert_equal want["content_type"], r.content_type, c["name"]
          next
        end
        answer = JSON.parse(r.body)
        assert_equal want["status"], answer["status"], "#{c["name"]}: #{r.body}"
        assert_equal want["keys"].sort, answer.keys.sort, "#{c["name"]}: #{r.body}" if want["keys"]
        assert_equal want["reason"], answer["reason"], c["name"] if want["reason"]
        assert_equal want["result"], answer["result"], c["name"] if want["result"]
      end
    end

    define_method(:test_a_streamed_body_past_the_bound_is_answered_413) do
      body = "x" * (PgWebhookInbox::Handler::MAX_BODY + 1)
      r = adapter.send_delivery("stripe", { "Content-Type" => "application/json" }, body, streamed: true)
      assert_equal 413, r.status, r.body
      assert_equal({ "status" => "too_large" }, JSON.parse(r.body))
    end

    define_method(:test_a_live_attempt_elsewhere_is_answered_409_until_it_ends) do
      run = Support.new_run
      body = Support.stripe_event("evt_#{run}_live", run)
      holder = PG.connect(Support::DATABASE_URL)
      holder.exec("BEGIN")
      held = PgWebhookInbox.receive(holder, "stripe", Support.stripe_headers(body), body, complete_on_commit: true)
      assert held.claimed
      r = adapter.send_delivery("stripe", Support.stripe_headers(body), body)
      assert_equal [409, "in_progress"], [r.status, JSON.parse(r.body)["status"]]
      holder.exec("ROLLBACK") # the live attempt dies: its claim goes with it
      holder.close
      r = adapter.send_delivery("stripe", Support.stripe_headers(body), body)
      assert_equal [200, "claimed"], [r.status, JSON.parse(r.body)["status"]]
      assert_equal 1, Support.orders(run, adapter.name)
    end

    define_method(:test_a_restart_in_the_middle_of_the_work_is_retried_and_done_once) do
      adapter.send_delivery(*Support.delivery(Support::CASES[0], Support.new_run)) # a pooled connection
      run = Support.new_run
      id = "evt_#{run}_restart"
      body = Support.stripe_event(id, run)
      adapter.trouble.restart << id
      r = adapter.send_delivery("stripe", Support.stripe_headers(body), body)
      assert_empty adapter.trouble.restart, "the restart did not happen inside the work"
      assert_equal [200, "claimed"], [r.status, JSON.parse(r.body)["status"]], r.body
      assert_equal 1, Support.orders(run, adapter.name)
      r = adapter.send_delivery("stripe", Support.stripe_headers(body), body)
      assert_equal [200, "duplicate"], [r.status, JSON.parse(r.body)["status"]], r.body
      assert_equal 1, Support.orders(run, adapter.name)
    end

    define_method(:test_a_database_that_stays_away_is_answered_503_with_retry_after) do
      away = adapter_class.new(Support::AWAY, retry_seconds: 1.0)
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      body = Support.stripe_event("evt_away", "away")
      r = away.send_delivery("stripe", Support.stripe_headers(body), body)
      assert_equal [503, { "status" => "unavailable" }], [r.status, JSON.parse(r.body)]
      assert_equal "30", r.headers["Retry-After"]
      assert Process.clock_gettime(Process::CLOCK_MONOTONIC) - started < 6
    ensure
      away&.close
    end

    define_method(:test_a_provider_nobody_registered_is_answered_404) do
      body = Support.stripe_event("evt_nobody", "nobody")
      r = adapter.send_delivery("nobody", Support.stripe_headers(body), body)
      assert_equal [404, "unknown_provider"], [r.status, JSON.parse(r.body)["status"]]
    end
  end.tap { |k| Object.const_set("#{adapter_class.name.delete_suffix("Adapter")}AnswersTest", k) }
end

# receive names only the optional arguments a delivery sets: one statement
# for each combination, each bound against the server here, each meaning
# what its arguments say.
class ReceiveCallsTest < Minitest::Test
  def test_every_combination_of_optional_arguments_binds_and_means_what_it_says
    conn = PG.connect(Support::DATABASE_URL)
    run = Support.new_run
    [true, false].product([true, false], [true, false], [true, false]).each_with_index do |(lease, inbox, url, coc), i|
      body = Support.stripe_event("evt_#{run}_call_#{i}", run)
      options = { complete_on_commit: coc }
      options[:lease] = "7 seconds" if lease # the default is 5 minutes
      options[:inbox] = false if inbox
      options[:url] = "https://hooks.example.com/webhooks/stripe" if url
      if lease && coc # a lease means two phases; the server refuses the pair
        conn.exec("BEGIN")
        assert_raises(PG::InvalidParameterValue) do
          PgWebhookInbox.receive(conn, "stripe", Support.stripe_headers(body), body, **options)
        end
        conn.exec("ROLLBACK")
        next
      end
      conn.transaction do
        d = PgWebhookInbox.receive(conn, "stripe", Support.stripe_headers(body), body, **options)
        assert_equal ["claimed", 200], [d.status, d.http_status], options.inspect
      end
      state, short = Support.admin do |a|
        a.exec_params("SELECT status::text, lease_expires_at - now() < interval '10 seconds' FROM webhook.events " \
                      "WHERE provider = 'stripe' AND event_id = $1", ["evt_#{run}_call_#{i}"]).values.first
      end
      # complete_on_commit: the commit completed the event; otherwise it is still held, for the lease asked for.
      assert_equal(coc ? "processed" : "processing", state, options.inspect)
      assert_equal(lease ? "t" : "f", short, "the lease asked for: #{options.inspect}") unless coc
    end
    # Queued when inbox is true and the provider is registered for claims.
    body = Support.stripe_event("evt_#{run}_queued", run)
    d = PgWebhookInbox.receive(conn, "stripe", Support.stripe_headers(body), body, inbox: true)
    assert_equal "queued", d.status
  ensure
    conn&.close
  end
end
