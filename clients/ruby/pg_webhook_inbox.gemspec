# frozen_string_literal: true

require_relative "lib/pg_webhook_inbox"

Gem::Specification.new do |s|
  s.name = "pg_webhook_inbox"
  s.version = PgWebhookInbox::VERSION
  s.summary = "Verified, exactly-once webhook handlers on the pg_webhook_inbox PostgreSQL extension"
  s.description = "webhook_receive in your transaction: Rack middleware, a Rails controller concern on " \
                  "ActiveRecord transactions, the pg gem, and the inbox's worker loop."
  s.license = "Apache-2.0"
  s.authors = ["pg_webhook_inbox developers"]
  s.files = Dir["lib/**/*.rb", "README.md"]
  s.require_paths = ["lib"]
  s.required_ruby_version = ">= 3.0"
  s.add_dependency "pg", ">= 1.2"
  s.add_development_dependency "actionpack", ">= 6.1"
  s.add_development_dependency "activerecord", ">= 6.1"
  s.add_development_dependency "minitest", ">= 5.14"
  s.add_development_dependency "rack", ">= 2.2"
end
