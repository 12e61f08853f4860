# frozen_string_literal: true

# What the suite shares: the cases of clients/testing/cases.json, signing
# as Stripe and Slack do, the count of order rows (as the owner, on a
# fresh connection each time: the restart tests cut every connection),
# and the server restart.

require "json"
require "openssl"
require "securerandom"
require "minitest/autorun"
require "pg"
require "pg_webhook_inbox"

module Support
  TESTING = File.expand_path("../../testing", __dir__)
  CASES = JSON.parse(File.read(File.join(TESTING, "cases.json")))["cases"]
  DATABASE_URL = ENV.fetch("DATABASE_URL")
  ADMIN_URL = ENV.fetch("ADMIN_URL")
  AWAY = "postgresql://clients_app@127.0.0.1:1/nowhere?connect_timeout=1"
  STRIPE_SECRET = "whsec_clients_suite"

  module_function

  def new_run = SecureRandom.hex(6)

  def stripe_event(event_id, run)
    JSON.generate({ id: event_id, object: "event", type: "invoice.paid", data: { object: { id: "in_#{run}" } } })
  end

  def hex_hmac(secret, payload) = OpenSSL::HMAC.hexdigest("SHA256", secret, payload)

  def stripe_headers(body, secret = STRIPE_SECRET)
    t = Time.now.to_i.to_s
    { "Content-Type" => "application/json", "Stripe-Signature" => "t=#{t},v1=#{hex_hmac(secret, "#{t}.#{body}")}" }
  end

  def fill(s, run) = s.gsub("{run}", run)

  # [provider, headers, body] of a case.
  def delivery(c, run)
    body = if c["body_bytes"]
             "x" * c["body_bytes"]
           elsif c["raw_body"]
             fill(c["raw_body"], run)
           else
             stripe_event(fill(c["event"], run), run)
           end
    headers = case c["sign"]
              when "stripe" then stripe_headers(body)
              when "forged" then stripe_headers(body, "whsec_someone_else")
              when "slack"
                t = Time.now.to_i.to_s
                { "Content-Type" => "application/json", "X-Slack-Request-Timestamp" => t,
                  "X-Slack-Signature" => "v0=#{hex_hmac("slack_clients_suite", "v0:#{t}:#{body}")}" }
              else { "Content-Type" => "application/json" }
              end
    [c["provider"], headers, body]
  end

  def expected(c, run) = JSON.parse(fill(JSON.generate(c["expect"]), run))

  def admin
    conn = PG.connect(ADMIN_URL)
    yield conn
  ensure
    conn&.close
  end

  def orders(pattern, handler)
    admin do |c|
      c.exec_params("SELECT count(*) FROM orders WHERE event_id LIKE $1 AND handler = $2",
                    ["%#{pattern}%", handler]).getvalue(0, 0).to_i
    end
  end

  def restart_server
    system(File.join(TESTING, "restart-server"), "0.3", exception: true)
  end

  # The application role's URL through PgBouncer in transaction mode
  # (.ci/clients-test starts it).
  def pooler_url = ENV.fetch("POOLER_URL")

  # PgBouncer stopped at once (every client connection cut) and started
  # again, as a redeploy of the pooler.
  def restart_pooler(seconds_down = 0)
    system(File.join(TESTING, "pooler"), "restart", ENV.fetch("POOLER_DIR"), seconds_down.to_s, exception: true)
  end

  # What goes wrong in the work, per event id: restart (before it writes), fail (after).
  class Trouble
    attr_reader :fail, :restart

    def initialize
      @fail = []
      @restart = []
    end

    def before(event_id)
      Support.restart_server if @restart.delete(event_id)
    end

    def after(event_id)
      raise "#{event_id} fails" if @fail.include?(event_id)
    end
  end
end
