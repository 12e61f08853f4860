# frozen_string_literal: true

require "json"

module PgWebhookInbox
  # webhook.claim_status: what a delivery was answered.
  STATUSES = %w[claimed retry duplicate in_progress dead rejected queued stale handshake filtered].freeze

  # An HTTP answer: status code, body, its type and extra headers.
  # Positional (one is made per delivery: keyword_init costs more).
  Answer = Struct.new(:status, :body, :content_type, :headers) do
    def self.json(status, **fields)
      new(status, JSON.generate(fields.compact), "application/json", {})
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

    # The body is larger than the handler or the database takes.
    def self.too_large = json(413, status: "too_large")

    # The database refused the delivery for a reason logged, never sent:
    # the provider retries.
    def self.error = json(500, status: "error")

    # [status, headers, [body]]
    def to_rack = [status, { "Content-Type" => content_type }.merge(headers), [body]]
  end

  # One row of webhook_receive: a webhook.receive_result.
  Delivery = Struct.new(:id, :claimed, :status, :attempts, :result, :http_status, :reason, :event_id,
                        :event_type, :event_type_signed, :response, :response_type) do
    # A boolean column as the pg gem hands it over (text "t"/"f", or true
    # and false with a type map).
    def self.bool(value) = value.nil? ? nil : (value == true || value == "t" || value == "true")

    def self.from_row(row)
      result = row["result"]
      new(row["id"], bool(row["claimed"]) == true, row["status"], row["attempts"]&.to_i,
          result && JSON.parse(result), row["http_status"].to_i, row["reason"], row["event_id"],
          row["event_type"], bool(row["event_type_signed"]), row["response"], row["response_type"])
    end

    # This transaction holds the event: do the work, or record its failure.
    def owns_event? = claimed

    # What to send the provider, once the transaction has committed.
    def answer
      unless response.nil? # an endpoint check: exactly this body
        return Answer.new(200, response, response_type || "text/plain", {})
      end

      Answer.json(http_status, status: status, reason: reason, result: status == "duplicate" ? result : nil)
    end
  end
end
