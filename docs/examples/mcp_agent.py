#!/usr/bin/env python3
"""An agent that uses the gateway through MCP, with the official MCP Python SDK (docs/agents.md, "Using the gateway
from an MCP client"). Needs `pip install mcp==2.3.0`.

What it does:
  1. opens an MCP session at GATEWAY_URL/mcp with its agent token (Streamable HTTP transport);
  2. lists the tools and checks that each input schema is a valid JSON Schema;
  3. subscribes to its reminders, `gateway://agents/{agent_id}/reminders`;
  4. schedules a reminder with `schedule_reminder` (a `tool_call_id`, so a retry is answered with the first answer),
     retries it once, and shows a refusal (a tool result with `isError` whose text starts with the reason code);
  5. waits for `notifications/resources/updated`, then reads the resource: the reminder is there;
  6. opens its event stream (`GET /gateway/events?topic=agent:<id>:scheduled`), which replays the reminder too;
  7. with OTHER_AGENT_TOKEN (another agent's token), shows that a session of that agent cannot read these reminders.

Configuration (environment): GATEWAY_URL (http://127.0.0.1:4000), AGENT_ID, AGENT_TOKEN (an `agt_…` token from
`POST /gateway/agents/{agent_id}/credentials`; on an open loopback gateway leave it empty and the agent is named in
the `X-Agent-Id` header), REMINDER_DELAY_MS (800), WAIT_SECONDS (20), OTHER_AGENT_TOKEN (optional).

Each step prints one line `step: <name> <json>` so that a test (bin/gateway/tests/it/mcp.rs) can follow it. Exit
status 0 when the reminder came back both ways, 1 otherwise.
"""

import json
import os
import sys
import urllib.parse
import warnings

import anyio
import httpx2
import jsonschema
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

# `resources/subscribe` is how the 2025 revisions (which the gateway speaks) subscribe; the SDK warns that the
# 2026 revision replaces it.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

GATEWAY_URL = os.environ.get("GATEWAY_URL", "http://127.0.0.1:4000").rstrip("/")
AGENT_ID = os.environ["AGENT_ID"]
AGENT_TOKEN = os.environ.get("AGENT_TOKEN", "")
REMINDER_DELAY_MS = int(os.environ.get("REMINDER_DELAY_MS", "800"))
WAIT_SECONDS = float(os.environ.get("WAIT_SECONDS", "20"))
OTHER_AGENT_TOKEN = os.environ.get("OTHER_AGENT_TOKEN", "")


def step(name, value):
    print(f"step: {name} {json.dumps(value, sort_keys=True)}", flush=True)


def headers_for(token):
    """With agent auth on, the token says who the agent is; on an open loopback gateway, X-Agent-Id does."""
    return {"Authorization": f"Bearer {token}"} if token else {"X-Agent-Id": AGENT_ID}


def reminders_uri(agent_id):
    return f"gateway://agents/{urllib.parse.quote(agent_id, safe='')}/reminders"


async def wait_for_reminder_on_stream(token, job_id):
    """The agent's own event stream: it replays the fires no stream has received, then sends new ones."""
    topic = urllib.parse.quote(f"agent:{AGENT_ID}:scheduled", safe="")
    url = f"{GATEWAY_URL}/gateway/events?topic={topic}"
    async with httpx2.AsyncClient(headers=headers_for(token), timeout=httpx2.Timeout(WAIT_SECONDS)) as client:
        async with client.stream("GET", url) as response:
            response.raise_for_status()
            event = {}
            async for line in response.aiter_lines():
                if line.startswith("event: "):
                    event["event"] = line[len("event: "):]
                elif line.startswith("data: "):
                    event["data"] = json.loads(line[len("data: "):])
                elif line == "" and event:
                    if event.get("event") == "reminder" and event["data"].get("job_id") == job_id:
                        return event["data"]
                    event = {}
    return None


async def main():
    uri = reminders_uri(AGENT_ID)
    updated = anyio.Event()

    async def on_message(message):
        # Server notifications arrive here; the one that matters is "your reminders changed".
        notification = getattr(message, "root", message)
        if getattr(notification, "method", None) == "notifications/resources/updated":
            if str(notification.params.uri) == uri:
                updated.set()

    async with create_mcp_http_client(headers=headers_for(AGENT_TOKEN)) as http_client:
        async with streamable_http_client(f"{GATEWAY_URL}/mcp", http_client=http_client) as (read, write):
            async with ClientSession(read, write, message_handler=on_message) as session:
                initialized = await session.initialize()
                step("initialized", {
                    "protocol_version": initialized.protocol_version,
                    "server": initialized.server_info.name,
                })

                listed = await session.list_tools()
                for tool in listed.tools:
                    jsonschema.Draft202012Validator.check_schema(tool.input_schema)
                step("tools", {
                    "names": [tool.name for tool in listed.tools],
                    "schemas": {tool.name: tool.input_schema for tool in listed.tools},
                })

                await session.subscribe_resource(uri)
                step("subscribed", {"uri": uri})

                arguments = {
                    "delay_ms": REMINDER_DELAY_MS,
                    "payload": {"task": "check_quota"},
                    "tool_call_id": f"mcp-example-{os.getpid()}",
                }
                scheduled = await session.call_tool("schedule_reminder", arguments)
                if scheduled.is_error:
                    step("failed", {"text": scheduled.content[0].text})
                    return 1
                step("scheduled", scheduled.structured_content)
                retried = await session.call_tool("schedule_reminder", arguments)
                step("retried", retried.structured_content)

                # A payload over the gateway's limit: refused as a tool result, the reason code first.
                refused = await session.call_tool(
                    "schedule_reminder", {"delay_ms": 1000, "payload": {"blob": "x" * 70_000}}
                )
                step("refused", {"is_error": refused.is_error, "text": refused.content[0].text})

                with anyio.fail_after(WAIT_SECONDS):
                    await updated.wait()
                step("notified", {"uri": uri})

                read_back = await session.read_resource(uri)
                reminders = json.loads(read_back.contents[0].text)["reminders"]
                step("read", {"reminders": reminders})

    job_id = scheduled.structured_content["job_id"]
    on_stream = await wait_for_reminder_on_stream(AGENT_TOKEN, job_id)
    step("stream", on_stream or {})

    if OTHER_AGENT_TOKEN:
        async with create_mcp_http_client(headers=headers_for(OTHER_AGENT_TOKEN)) as http_client:
            async with streamable_http_client(f"{GATEWAY_URL}/mcp", http_client=http_client) as (read, write):
                async with ClientSession(read, write) as other:
                    await other.initialize()
                    try:
                        await other.read_resource(uri)
                        step("other_agent", {"refused": False})
                    except MCPError as error:
                        step("other_agent", {"refused": True, "code": error.code, "message": error.error.message})

    found = any(reminder["job_id"] == job_id for reminder in reminders)
    return 0 if found and on_stream else 1


if __name__ == "__main__":
    sys.exit(anyio.run(main))
