# frozen_string_literal: true

# A worker in a process of its own, for the tests that kill it or stop it:
# `ruby worker_process.rb SECONDS_PER_EVENT LEASE`. It prints `working
# EVENT_ID` as each event's work starts (written, not committed), then
# takes SECONDS_PER_EVENT over it.

require "pg_webhook_inbox"

$stdout.sync = true
seconds, lease = ARGV
PgWebhookInbox::Worker.new(ENV.fetch("DATABASE_URL"), batch: 5, lease: lease) do |event, conn|
  conn.exec_params("INSERT INTO orders (provider, event_id, event_type, handler) VALUES ($1, $2, $3, 'worker')",
                   [event.provider, event.event_id, event.event_type])
  puts "working #{event.event_id}"
  sleep seconds.to_f
end.handle_signals.run
