-- wrk script: valid DecisionLogs.
wrk.method = "POST"
wrk.path = "/gateway/messages"
wrk.headers["content-type"] = "application/json"
wrk.body = [[{"meta":{"trace_id":"t-1","timestamp":"2026-02-22T12:00:00Z"},
"identity":{"agent_id":"agent-7","agent_type":"researcher","capability_version":"1.4.0"},
"cognition":{"intent":"summarize","reasoning_chain":["a","b","c"],"confidence_score":0.8},
"action":{"status":"success","tool_call":"search","tool_input":{"q":"rust"}},
"state_delta":{"tokens_consumed":512},"control":{"is_terminal":false}}]]
