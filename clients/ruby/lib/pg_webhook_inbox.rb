# frozen_string_literal: true

# Verified, exactly-once webhook handling on the pg_webhook_inbox
# PostgreSQL extension, in the caller's transaction: the database checks
# the signature, deduplicates and claims the delivery, and the handler's
# work commits with the event's completion or rolls back with it.
#
# - PgWebhookInbox::Database: a small pool of PG connections (the pg gem).
# - PgWebhookInbox::ActiveRecordDatabase: ActiveRecord's connection and
#   transactions (require "pg_webhook_inbox/active_record").
# - PgWebhookInbox::Handler: one delivery, with the outage rule.
# - PgWebhookInbox::Rack::Middleware, PgWebhookInbox::Rails::Webhooks
#   (a controller concern), PgWebhookInbox::Worker.
module PgWebhookInbox
  VERSION = "0.1.0"
end

require_relative "pg_webhook_inbox/statements"
require_relative "pg_webhook_inbox/delivery"
require_relative "pg_webhook_inbox/outage"
require_relative "pg_webhook_inbox/database"
require_relative "pg_webhook_inbox/handler"
require_relative "pg_webhook_inbox/rack"
require_relative "pg_webhook_inbox/worker"
