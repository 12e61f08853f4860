# frozen_string_literal: true

module PgWebhookInbox
  # The SQL the package sends: all of it, in one place. JSON goes over as
  # text and comes back as text.
  module Statements
    # webhook_receive's columns, as text (the pg gem's text format).
    RECEIVE_COLUMNS = "id, claimed, status, attempts, result, http_status, reason, event_id, event_type, " \
                      "event_type_signed, response, response_type"

    # The optional arguments and their types, in the order receive_call appends them.
    OPTIONAL = [%w[lease interval], %w[inbox boolean], %w[url text]].freeze

    # webhook_receive naming only the optional arguments a delivery sets
    # (one statement for each combination, built once): an argument left
    # out is its default, and the server binds a shorter call faster.
    RECEIVE_CALLS = [true, false].product([true, false], [true, false]).to_h do |set|
      named = OPTIONAL.zip(set).filter_map { |arg, on| arg if on } << %w[complete_on_commit boolean]
      args = named.each_with_index.map { |(name, type), i| "#{name} => $#{i + 4}::#{type}" }
      [set, "SELECT #{RECEIVE_COLUMNS} FROM webhook_receive($1::text, $2::jsonb, $3::bytea, #{args.join(", ")})".freeze]
    end.freeze

    def self.receive(lease:, inbox:, url:) = RECEIVE_CALLS.fetch([lease, inbox, url])
    COMPLETE = "SELECT webhook_complete($1::uuid, $2::text::jsonb)"
    FAIL = "SELECT webhook_fail($1::uuid, $2::text)"
    HAND_BACK = "SELECT webhook_fail($1::uuid, 'worker shut down', retry_in => '0 s')"
    NEXT = "SELECT id::text, provider, event_id, event_type, payload::text, attempts, consumer, traceparent, origin " \
           "FROM webhook_next($1::int, $2::text, provider => $3::text, lease => $4::interval)"
    COMPLETE_BATCH = "SELECT webhook_complete_batch($1::uuid[])"
    OUTBOUND_KEY = "SELECT webhook_outbound_key($1::uuid, $2::text)"
    LISTEN = "LISTEN webhook_inbox"
    # The work's savepoint: a failure undoes the work, not the claim.
    SAVEPOINT = "SAVEPOINT pg_webhook_inbox_work"
    RELEASE = "RELEASE SAVEPOINT pg_webhook_inbox_work"
    ROLLBACK_TO = "ROLLBACK TO SAVEPOINT pg_webhook_inbox_work"

    UNKNOWN_PROVIDER = "42704" # webhook_receive: no such provider registered
    PAYLOAD_TOO_LARGE = "54000" # webhook_receive: larger than webhook.max_payload_size
    TAKEN_OVER = "55006" # a lease ran out and another worker holds the event
  end
end
