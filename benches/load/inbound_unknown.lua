-- wrk script: signed-looking inbound webhooks to a config id that does not exist (BODY_BYTES: body size, else a
-- small JSON body). What an attacker spraying ids costs the gateway (benches/load/inbound_404.sh).
wrk.method = "POST"
wrk.body = os.getenv("BODY_BYTES") and string.rep("a", tonumber(os.getenv("BODY_BYTES"))) or '{"action":"opened"}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["X-Observatory-Signature"] = "sha256=" .. string.rep("0", 64)
