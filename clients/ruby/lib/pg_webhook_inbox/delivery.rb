# frozen_string_literal: true

require "json"

module PgWebhookInbox
  # webhook.claim_status: what a delivery was answered.
  STATUSES = %w[claimed retry duplicate in_progress dead rejected queued stale handshake filtered].freeze

  # An HTTP answer: status code, body, its type and extra headers.
  Answer = Struct.new(:status, :body, :content_type, :headers, keyword_init: true) do
    def self.json(status, **fields)
      new(status: status, body: JSON.generate(fields.compact), content_type: "application/json", headers: {})
    end

    # The work failed and was recorded: the next delivery retries it.
    def self.failed = json(500, status: "failed")

    # The database could not be reached in time; nothing was stored. Every provider retries a 503.
    def self.unavailable
      a = json(503, status: "unavailable")
      a.headers["Retry-After"] = "30"
      a
    end

    def self.unknown_provider(provider) = json(404, status: "unknown_provider", provider: provider)

    # [status, headers, [body]]
    def to_rack = [status, { "Content-Type" => content_type }.merge(headers), [body]]
  end

  # One row of webhook_receive: a webhook.receive_result.
  Delivery = Struct.new(:id, :claimed, :status, :attempts, :result, :http_status, :reason, :event_id,
                        :event_type, :event_type_signed, :response, :response_type, keyword_init: true) do
    def self.from_row(row)
      bool = ->(v) { v.nil? ? nil : [true, "t", "true"].include?(v) }
      new(id: row["id"], claimed: bool.call(row["claimed"]) == true, status: row["status"],
          attempts: row["attempts"]&.to_i, result: row["result"] && JSON.parse(row["result"]),
          http_status: row["http_status"].to_i, reason: row["reason"], event_id: row["event_id"],
          event_type: row["event_type"], event_type_signed: bool.call(row["event_type_signed"]),
          response: row["response"], response_type: row["response_type"])
    end

    # This transaction holds the event: do the work, or record its failure.
    def owns_event? = claimed

    # What to send the provider, once the transaction has committed.
    def answer
      unless response.nil? # an endpoint check: exactly this body
        return Answer.new(status: 200, body: response, content_type: response_type || "text/plain", headers: {})
      end

      Answer.json(http_status, status: status, reason: reason, result: status == "duplicate" ? result : nil)
    end
  end
end
