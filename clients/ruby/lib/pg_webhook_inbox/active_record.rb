# frozen_string_literal: true

require "active_record"
require_relative "../pg_webhook_inbox"

module PgWebhookInbox
  # ActiveRecord's connection and transactions (the postgresql adapter):
  # the claim is made in ActiveRecord's transaction, so the work's model
  # writes commit with the event's completion or roll back with it.
  class ActiveRecordDatabase
    def initialize(model = ::ActiveRecord::Base)
      @model = model
    end

    # Runs the block with the transaction's PG::Connection.
    def transaction
      @model.transaction(requires_new: true) do
        yield @model.connection.raw_connection
      end
    end

    # A connection the database cut is reconnected for the next attempt.
    def after_outage
      @model.connection.reconnect!
    rescue StandardError
      nil # still away: the next attempt finds out
    end
  end

  # Rails: a controller concern.
  #
  #   class WebhooksController < ActionController::Base
  #     include PgWebhookInbox::Rails::Webhooks
  #     def create
  #       receive_webhook { |delivery| InvoicePaid.create!(event_id: delivery.event_id) }
  #     end
  #   end
  #   # routes: post "webhooks/:provider", to: "webhooks#create"
  module Rails
    module Webhooks
      extend ActiveSupport::Concern

      included do
        # Providers sign their requests; they send no CSRF token.
        skip_before_action :verify_authenticity_token, raise: false
      end

      class_methods do
        # The handler of this controller's deliveries; set it for options:
        #   self.webhook_handler = PgWebhookInbox::Handler.new(PgWebhookInbox::ActiveRecordDatabase.new,
        #                                                      public_url: "https://hooks.example.com")
        attr_writer :webhook_handler

        def webhook_handler
          @webhook_handler ||= Handler.new(ActiveRecordDatabase.new)
        end
      end

      # Receives the request's delivery (the bytes before any parsing, up to
      # the handler's max_body), runs the block as the work, and renders
      # the answer.
      # The provider is read from the path parameters: `params` would parse
      # the body, and an unreadable one must be answered by the database.
      def receive_webhook(provider = request.path_parameters[:provider], &work)
        handler = self.class.webhook_handler
        answer = begin
          body = PgWebhookInbox::Rack.body(request.env, handler.max_body)
          handler.call(provider.to_s, PgWebhookInbox::Rack.headers(request.env), body, path: request.fullpath, &work)
        rescue PgWebhookInbox::PayloadTooLarge
          Answer.too_large
        end
        answer.headers.each { |k, v| response.set_header(k, v) }
        render body: answer.body, status: answer.status, content_type: answer.content_type
      end
    end
  end
end
