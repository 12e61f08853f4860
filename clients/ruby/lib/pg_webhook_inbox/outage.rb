# frozen_string_literal: true

require "pg"

module PgWebhookInbox
  # webhook_receive knows no provider of this name (42704): answered 404.
  class UnknownProvider < StandardError
    attr_reader :provider

    def initialize(provider)
      @provider = provider
      super("no provider #{provider.inspect} is registered")
    end
  end

  # The body is larger than the handler takes (MAX_BODY), or than the
  # database's webhook.max_payload_size (54000): answered 413.
  class PayloadTooLarge < StandardError; end

  # Telling a database that is away from a delivery that went wrong.
  module Outage
    module_function

    # The SQLSTATE behind an error, through ActiveRecord's wrappers.
    def sqlstate(error)
      each_cause(error) do |e|
        return e.result.error_field(PG::PG_DIAG_SQLSTATE) if e.is_a?(PG::Error) && e.respond_to?(:result) && e.result
      end
      nil
    end

    # Whether an error means the database is away (a restart, a failover,
    # a pool with no connection to give): SQLSTATE class 08, an
    # administrator's shutdown (57P01-03), too many connections (53300),
    # or a lost or refused connection.
    def outage?(error)
      state = sqlstate(error)
      return state.start_with?("08") || %w[57P01 57P02 57P03 53300].include?(state) if state

      each_cause(error) do |e|
        return true if e.is_a?(PG::ConnectionBad) || e.is_a?(PG::UnableToSend) || e.is_a?(SystemCallError) ||
                       e.is_a?(IOError) || e.class.name.to_s.end_with?("ConnectionNotEstablished", "ConnectionTimeoutError")
      end
      false
    end

    def each_cause(error)
      seen = 0
      while error && seen < 5
        yield error
        error = error.cause
        seen += 1
      end
    end
  end
end
