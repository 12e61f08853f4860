# frozen_string_literal: true

# A handler through the Ruby package against the same handler calling SQL
# by hand: deliveries a second, one after another on a pool of one (the
# package's own: the pg gem has none), so that both run on the same
# connection and server process, as in the other languages' benchmarks;
# the two taking turns, each going first in every other round. Prints one
# JSON line. `ruby bench.rb DELIVERIES ROUNDS`.

require "json"
require "openssl"
require "securerandom"
require "pg_webhook_inbox"

n, rounds = ARGV.map(&:to_i)
INSERT = "INSERT INTO orders (provider, event_id, event_type, handler) VALUES ('stripe', $1, $2, 'bench')"
RECEIVE = "SELECT id, claimed, status, http_status, reason, response, event_id, event_type " \
          "FROM webhook_receive($1, $2::jsonb, $3::bytea, url => $4, complete_on_commit => true)"

def signed(count)
  Array.new(count) do
    body = JSON.generate({ id: "evt_#{SecureRandom.hex(16)}", object: "event", type: "invoice.paid",
                           data: { object: { id: "in_1" } } })
    t = Time.now.to_i.to_s
    v1 = OpenSSL::HMAC.hexdigest("SHA256", "whsec_clients_suite", "#{t}.#{body}")
    [{ "content-type" => "application/json", "stripe-signature" => "t=#{t},v1=#{v1}" }, body]
  end
end

# What a careful handler writes without the package, in a transaction of
# the pool's.
def by_hand(database, headers, body)
  database.transaction do |conn|
    d = conn.exec_params(RECEIVE, ["stripe", JSON.generate(headers), { value: body, format: 1 }, nil]).first
    next [200, d["response"]] if d["response"]
    next [d["http_status"].to_i, JSON.generate(status: d["status"], reason: d["reason"])] unless d["claimed"] == "t"

    conn.exec("SAVEPOINT work")
    begin
      conn.exec_params(INSERT, [d["event_id"], d["event_type"]])
      conn.exec("RELEASE SAVEPOINT work")
    rescue PG::Error => e
      conn.exec("ROLLBACK TO SAVEPOINT work")
      conn.exec_params("SELECT webhook_fail($1, $2)", [d["id"], e.message])
      next [500, '{"status":"failed"}']
    end
    [d["http_status"].to_i, JSON.generate(status: d["status"], reason: d["reason"])]
  end
end

database = PgWebhookInbox::Database.new(ENV.fetch("DATABASE_URL"), size: 1)
handler = PgWebhookInbox::Handler.new(database)
rates = { package: [], by_hand: [] }
rounds.times do |r|
  (r.even? ? %i[package by_hand] : %i[by_hand package]).each do |name|
    batch = signed(n)
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    batch.each do |headers, body|
      status = if name == :package
                 handler.call("stripe", headers, body) { |d, c| c.exec_params(INSERT, [d.event_id, d.event_type]) && nil }.status
               else
                 by_hand(database, headers, body).first
               end
      raise "answered #{status}" unless status == 200
    end
    rates[name] << n / (Process.clock_gettime(Process::CLOCK_MONOTONIC) - started)
  end
end
median = ->(xs) { xs.sort[xs.size / 2] }
p, h = median.call(rates[:package]), median.call(rates[:by_hand])
puts JSON.generate(language: "ruby (pg Handler)", package: p.round, by_hand: h.round, ratio: (p / h).round(3))
