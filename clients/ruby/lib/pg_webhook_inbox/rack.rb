# frozen_string_literal: true

module PgWebhookInbox
  # Rack: deliveries as Rack env, answers as Rack responses.
  module Rack
    # Every header of a Rack env, by its HTTP name.
    def self.headers(env)
      h = env.each_with_object({}) do |(key, value), out|
        out[key.delete_prefix("HTTP_").tr("_", "-").downcase] = value if key.start_with?("HTTP_")
      end
      h["content-type"] = env["CONTENT_TYPE"] if env["CONTENT_TYPE"]
      h["content-length"] = env["CONTENT_LENGTH"] if env["CONTENT_LENGTH"]
      h
    end

    # The raw bytes of the body, read before anything parses it, up to
    # limit: PayloadTooLarge for a Content-Length over it, before anything
    # is read, or for a stream that goes past it.
    def self.body(env, limit = Handler::MAX_BODY)
      raise PayloadTooLarge, "Content-Length over #{limit} bytes" if env["CONTENT_LENGTH"].to_i > limit

      input = env["rack.input"]
      return "".b unless input

      input.rewind if input.respond_to?(:rewind)
      data = input.read(limit + 1).to_s.b
      input.rewind if input.respond_to?(:rewind)
      raise PayloadTooLarge, "body over #{limit} bytes" if data.bytesize > limit

      data
    end

    def self.path(env)
      query = env["QUERY_STRING"].to_s
      env["SCRIPT_NAME"].to_s + env["PATH_INFO"].to_s + (query.empty? ? "" : "?#{query}")
    end

    # Answers POST /webhooks/<provider> (or what `path` matches, its first
    # group the provider) before the application sees it; everything else
    # goes on to the application.
    #
    #   use PgWebhookInbox::Rack::Middleware, handler: handler do |delivery, conn| … end
    class Middleware
      def initialize(app, handler:, path: %r{\A/webhooks/([^/]+)\z}, &work)
        raise ArgumentError, "the work is the block" unless work

        @app, @handler, @path, @work = app, handler, path, work
      end

      def call(env)
        match = env["REQUEST_METHOD"] == "POST" && @path.match(env["PATH_INFO"].to_s)
        return @app.call(env) unless match

        begin
          body = Rack.body(env, @handler.max_body)
        rescue PayloadTooLarge
          return Answer.too_large.to_rack
        end
        @handler.call(match[1], Rack.headers(env), body, path: Rack.path(env), &@work).to_rack
      end
    end
  end
end
