-- wrk's side of bench/ingress: each connection's thread sends its own
-- share of the pre-signed GitHub deliveries in the file given as the first
-- argument (lines: delivery id, signature, body; tab-separated), one each,
-- in order. Arguments: FILE THREADS.
local deliveries = {}
local next_one = 1
local threads = {}
overrun = 0

function setup(thread)
    thread:set("thread_id", #threads)
    table.insert(threads, thread)
end

function init(args)
    local file, nthreads = args[1], tonumber(args[2])
    local i = 0
    for line in io.lines(file) do
        if i % nthreads == thread_id then
            local delivery, signature, body = line:match("^([^\t]*)\t([^\t]*)\t(.*)$")
            deliveries[#deliveries + 1] = wrk.format("POST", wrk.path, {
                ["X-GitHub-Delivery"] = delivery,
                ["X-GitHub-Event"] = "push",
                ["X-Hub-Signature-256"] = signature,
                ["Content-Type"] = "application/json",
            }, body)
        end
        i = i + 1
    end
end

function request()
    local r = deliveries[next_one]
    next_one = next_one + 1
    if r then
        return r
    end
    -- Past the end: the last one again (a duplicate), and counted, for
    -- bench/ingress to refuse the run.
    overrun = overrun + 1
    return deliveries[#deliveries]
end

function done(summary, latency, requests)
    io.write(string.format("latency_ms\t%.3f\t%.3f\t%.3f\n",
        latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000))
    io.write(string.format("non2xx\t%d\n", summary.errors.status))
    local past = 0
    for _, thread in ipairs(threads) do
        past = past + thread:get("overrun")
    end
    io.write(string.format("overrun\t%d\n", past))
end
