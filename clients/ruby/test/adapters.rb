# frozen_string_literal: true

# Every way the package takes a delivery, each as send(provider, headers,
# body) through the framework's own request handling, with the same work:
# one order row.

require "rack"
require "rack/mock"
require "action_controller"
require "pg_webhook_inbox/active_record"
require_relative "support"

INSERT = "INSERT INTO orders (provider, event_id, event_type, handler) VALUES ('stripe', $1, $2, $3)"

# A sent request's answer.
Sent = Struct.new(:status, :content_type, :body, :headers)

# streamed: sent without Content-Length, as a chunked request arrives.
def mock_post(app, provider, headers, body, streamed: false)
  env = headers.to_h do |k, v|
    k.casecmp?("content-type") ? ["CONTENT_TYPE", v] : ["HTTP_#{k.upcase.tr("-", "_")}", v]
  end
  request = Rack::MockRequest.env_for("/webhooks/#{provider}", env.merge(method: "POST", input: body))
  request.delete("CONTENT_LENGTH") if streamed
  r = Rack::MockResponse.new(*app.call(request))
  Sent.new(r.status, r.headers["Content-Type"].to_s.split(";").first, r.body, r.headers)
end

# Rack middleware on the package's own pool of pg connections.
class RackAdapter
  attr_reader :trouble

  def name = "rack"

  def initialize(url, retry_seconds: 8.0)
    @trouble = Support::Trouble.new
    @database = PgWebhookInbox::Database.new(url, size: 4)
    trouble = @trouble
    fallthrough = ->(_env) { [418, { "Content-Type" => "text/plain" }, ["the application"]] }
    @app = PgWebhookInbox::Rack::Middleware.new(
      fallthrough, handler: PgWebhookInbox::Handler.new(@database, retry_seconds: retry_seconds)
    ) do |delivery, conn|
      trouble.before(delivery.event_id)
      conn.exec_params(INSERT, [delivery.event_id, delivery.event_type, "rack"])
      trouble.after(delivery.event_id)
      { order: delivery.event_id }
    end
  end

  def send_delivery(provider, headers, body, streamed: false) = mock_post(@app, provider, headers, body, streamed:)
  def close = @database.close
end

# ActiveRecord models of the suite's database, and of a server that is not there.
class SuiteRecord < ActiveRecord::Base
  self.abstract_class = true
end

class Order < SuiteRecord
  self.table_name = "orders"
  self.primary_key = nil
end

class AwayRecord < ActiveRecord::Base
  self.abstract_class = true
end

# A Rails controller with the concern, in ActiveRecord's transaction.
class WebhooksController < ActionController::Base
  include PgWebhookInbox::Rails::Webhooks

  class << self
    attr_accessor :trouble
  end

  def create
    receive_webhook do |delivery|
      self.class.trouble.before(delivery.event_id)
      Order.create!(provider: "stripe", event_id: delivery.event_id, event_type: delivery.event_type, handler: "rails")
      self.class.trouble.after(delivery.event_id)
      { order: delivery.event_id }
    end
  end
end

class RailsAdapter
  attr_reader :trouble

  def name = "rails"

  def initialize(url, retry_seconds: 8.0)
    @trouble = Support::Trouble.new
    model = url == Support::AWAY ? AwayRecord : SuiteRecord
    model.establish_connection(url)
    WebhooksController.trouble = @trouble
    WebhooksController.webhook_handler = PgWebhookInbox::Handler.new(
      PgWebhookInbox::ActiveRecordDatabase.new(model), retry_seconds: retry_seconds
    )
    @routes = ActionDispatch::Routing::RouteSet.new
    @routes.draw { post "/webhooks/:provider", to: "webhooks#create" }
  end

  def send_delivery(provider, headers, body, streamed: false) = mock_post(@routes, provider, headers, body, streamed:)
  def close = nil
end

ADAPTERS = [RackAdapter, RailsAdapter].freeze
