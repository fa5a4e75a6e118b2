"""Schemathesis hooks for the fuzzing run of it/openapi.rs (and the local run docs/api.md describes).

Every webhook config the fuzzer creates gets a loopback target: deliveries are really attempted, and a generated
URL would otherwise send them (and a DNS lookup before them) beyond loopback. The gateway's SSRF guard refuses
loopback targets, so no attempt connects anywhere; everything else in the request is as generated.
"""

import schemathesis

LOOPBACK_TARGET = "http://127.0.0.1:9/fuzzed"


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    body = case.body
    if isinstance(body, dict) and isinstance(body.get("target_url"), str):
        body["target_url"] = LOOPBACK_TARGET
