# frozen_string_literal: true

# The README's ten-line handlers, run as they are printed: each verifies a
# signed Stripe delivery, writes its row once, answers the redelivery as a
# duplicate and refuses a forgery.

require_relative "adapters"

# What the Rack block runs behind the middleware.
MyApp = ->(_env) { [404, { "Content-Type" => "text/plain" }, ["the application"]] }

class ReadmeTest < Minitest::Test
  README = File.read(File.expand_path("../README.md", __dir__))
  SECTION = README.split("## A Stripe handler in ten lines", 2)[1].split("\n## ", 2)[0]
  BLOCKS = SECTION.scan(/```ruby\n(.*?)```/m).flatten

  def block(marker)
    code = BLOCKS.find { |b| b.include?(marker) } or flunk("no block with #{marker}")
    assert_operator code.strip.lines.size, :<=, 12, "the README promises about ten lines"
    code
  end

  def exactly_once(app)
    run = Support.new_run
    event = "evt_#{run}_readme"
    body = Support.stripe_event(event, run)
    r = mock_post(app, "stripe", Support.stripe_headers(body), body)
    assert_equal [200, "claimed"], [r.status, JSON.parse(r.body)["status"]], r.body
    r = mock_post(app, "stripe", Support.stripe_headers(body), body)
    assert_equal [200, "duplicate"], [r.status, JSON.parse(r.body)["status"]], r.body
    r = mock_post(app, "stripe", Support.stripe_headers(body, "whsec_someone_else"), body)
    assert_equal [401, "bad_signature"], [r.status, JSON.parse(r.body)["reason"]], r.body
    rows = Support.admin { |c| c.exec_params("SELECT count(*) FROM invoices_paid WHERE event_id = $1", [event]).getvalue(0, 0) }
    assert_equal "1", rows
  end

  def test_rack
    app = Rack::Builder.new_from_string(block("config.ru"))
    exactly_once(app)
  end

  def test_rails
    ActiveRecord::Base.establish_connection(Support::DATABASE_URL)
    readme = Object.const_set(:ReadmeRails, Module.new) # a name: ActiveRecord names its models by it
    readme.const_set(:InvoicePaid, Class.new(ActiveRecord::Base) do
      self.table_name = "invoices_paid"
      self.primary_key = nil
    end)
    readme.module_eval(block("ActionController::Base"))
    controller = readme.const_get(:WebhooksController)
    routes = ActionDispatch::Routing::RouteSet.new
    routes.draw { post "/webhooks/:provider", to: controller.action(:create) }
    exactly_once(routes)
  end
end
