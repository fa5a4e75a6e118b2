#!/usr/bin/env python3
"""A complete Agent Gateway client, standard library only (docs/agents.md walks through it).

What it does, as a long-running agent would:
  1. heartbeats (every HEARTBEAT_EVERY seconds in a real agent; once per loop turn here);
  2. keeps a stream of its reminders open (`agent:<id>:scheduled`), reconnecting with `Last-Event-ID` so that
     nothing fired while it was away is missed, and deduplicating on `fire_id` (delivery is at least once);
  3. asks for a reminder with the synchronous `schedule_reminder` tool, retrying with the same `tool_call_id`
     after a network error (the gateway answers a retry with the recorded result);
  4. lists its pending reminders, sends a DecisionLog, and waits for the reminder to arrive on its stream;
  5. honours 429 `Retry-After`, and stops on 401/403 (a wrong or revoked token is not something to retry).

Configuration (environment): GATEWAY_URL (http://127.0.0.1:4000), AGENT_ID, AGENT_TOKEN (an `agt_…` token from
`POST /gateway/agents/{agent_id}/credentials`; may be empty when the gateway runs with agent auth off),
REMINDER_DELAY_MS (1500), WAIT_SECONDS (30).

Each step prints one line `step: <name> <json>` so that a test (bin/gateway/tests/it/agent_client.rs) can follow it.
Exit status 0 when the reminder it scheduled arrived on its stream, 1 otherwise.
"""

import http.client
import json
import os
import queue
import sys
import threading
import time
import urllib.parse
import uuid


class GatewayError(Exception):
    def __init__(self, status, body):
        super().__init__(f"{status} {body.get('reason')}: {body.get('detail', '')}")
        self.status = status
        self.body = body


class Gateway:
    """One agent's view of the gateway: JSON over HTTP with the agent's token."""

    def __init__(self, url, agent_id, token):
        parsed = urllib.parse.urlsplit(url)
        self.host = parsed.hostname
        self.port = parsed.port or 80
        self.agent_id = agent_id
        self.token = token

    def headers(self, extra=None):
        headers = {"content-type": "application/json"}
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        headers.update(extra or {})
        return headers

    def request(self, method, path, body=None, attempts=5):
        """Sends one request; waits out 429 `Retry-After` and retries network errors (the same body, so the same
        `tool_call_id`: a retried tool call is answered from the gateway's record, never done twice)."""
        for attempt in range(attempts):
            connection = http.client.HTTPConnection(self.host, self.port, timeout=10)
            try:
                connection.request(method, path, body=None if body is None else json.dumps(body),
                                   headers=self.headers())
                response = connection.getresponse()
                raw = response.read()
            except (ConnectionError, OSError):
                time.sleep(0.2 * (attempt + 1))
                continue
            finally:
                connection.close()
            payload = json.loads(raw) if raw else {}
            if response.status == 429 and payload.get("reason") == "rate_limited":
                time.sleep(float(response.getheader("retry-after", "1")))
                continue
            if response.status >= 400:
                raise GatewayError(response.status, payload)
            return response.status, payload
        raise ConnectionError(f"{method} {path}: no answer after {attempts} attempts")

    def heartbeat(self):
        return self.request("POST", "/gateway/heartbeat", {
            "type": "heartbeat",
            "agent_id": self.agent_id,
            "cluster_id": "example-cluster",
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        })

    def tool(self, name, params, tool_call_id=None):
        body = {"agent_id": self.agent_id, "tool_call_id": tool_call_id or str(uuid.uuid4()), "params": params}
        return self.request("POST", f"/gateway/tools/{name}", body)

    def decision_log(self, intent):
        return self.request("POST", "/gateway/messages", {
            "meta": {"trace_id": str(uuid.uuid4()), "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
            "identity": {"agent_id": self.agent_id, "agent_type": "example", "capability_version": "1.0"},
            "cognition": {"intent": intent},
            "action": {"status": "success"},
        })


class ReminderStream(threading.Thread):
    """Holds `GET /gateway/events?topic=agent:<id>:scheduled` open and puts each new reminder on `reminders`.

    On a dropped connection it reconnects with `Last-Event-ID: <the last fire_id it saw>`: the gateway then replays
    every retained fire after that one before the live ones. Fires are delivered at least once, so it remembers the
    fire_ids it has handled and skips repeats."""

    def __init__(self, gateway):
        super().__init__(daemon=True)
        self.gateway = gateway
        self.reminders = queue.Queue()
        self.connected = threading.Event()
        self.last_event_id = None
        self.seen = set()
        self.stopped = threading.Event()

    def run(self):
        while not self.stopped.is_set():
            try:
                self.listen()
            except (ConnectionError, OSError, http.client.HTTPException):
                pass
            except GatewayError as error:
                print(f"step: stream_refused {json.dumps({'status': error.status})}", flush=True)
                return
            time.sleep(0.5)

    def listen(self):
        topic = urllib.parse.quote(f"agent:{self.gateway.agent_id}:scheduled", safe="")
        connection = http.client.HTTPConnection(self.gateway.host, self.gateway.port, timeout=60)
        extra = {"accept": "text/event-stream"}
        if self.last_event_id:
            extra["last-event-id"] = self.last_event_id
        connection.request("GET", f"/gateway/events?topic={topic}", headers=self.gateway.headers(extra))
        response = connection.getresponse()
        if response.status != 200:
            raise GatewayError(response.status, json.loads(response.read() or b"{}"))
        self.connected.set()
        event = {}
        while not self.stopped.is_set():
            line = response.readline()
            if not line:
                raise ConnectionError("stream ended")
            line = line.decode("utf-8").rstrip("\r\n")
            if line == "":
                self.dispatch(event)
                event = {}
            elif line.startswith(":"):
                continue  # a comment: `: connected`, keep-alives
            else:
                field, _, value = line.partition(":")
                event[field] = event.get(field, "") + value.removeprefix(" ")

    def dispatch(self, event):
        if event.get("event") != "reminder":
            return  # `lagged` tells how many live events this stream missed; the replay after a reconnect has them
        fire = json.loads(event["data"])
        self.last_event_id = event.get("id", fire["fire_id"])
        if fire["fire_id"] in self.seen:
            return
        self.seen.add(fire["fire_id"])
        self.reminders.put(fire)


def step(name, value):
    print(f"step: {name} {json.dumps(value, sort_keys=True)}", flush=True)


def main():
    gateway = Gateway(os.environ.get("GATEWAY_URL", "http://127.0.0.1:4000"), os.environ["AGENT_ID"],
                      os.environ.get("AGENT_TOKEN", ""))
    delay_ms = int(os.environ.get("REMINDER_DELAY_MS", "1500"))
    wait_seconds = float(os.environ.get("WAIT_SECONDS", "30"))
    try:
        status, body = gateway.heartbeat()
        step("heartbeat", {"status": status, "body": body})

        stream = ReminderStream(gateway)
        stream.start()
        if not stream.connected.wait(10):
            step("stream", {"connected": False})
            return 1
        step("stream", {"connected": True})

        call_id = str(uuid.uuid4())
        params = {"delay_ms": delay_ms, "payload": {"task": "check_quota"}}
        _, scheduled = gateway.tool("schedule_reminder", params, tool_call_id=call_id)
        step("scheduled", scheduled["result"])
        # A retry with the same tool_call_id (as after a lost answer) gets the same job, not a second one.
        _, retried = gateway.tool("schedule_reminder", params, tool_call_id=call_id)
        step("retried", retried["result"])

        _, listed = gateway.tool("list_reminders", {})
        step("listed", {"job_ids": [reminder["job_id"] for reminder in listed["result"]["reminders"]]})

        status, accepted = gateway.decision_log("waiting for the quota check")
        step("decision_log", {"status": status, "trace_id": accepted.get("trace_id") is not None})

        deadline = time.monotonic() + wait_seconds
        while time.monotonic() < deadline:
            gateway.heartbeat()
            try:
                fire = stream.reminders.get(timeout=1)
            except queue.Empty:
                continue
            step("reminder", {"job_id": fire["job_id"], "fire_id": fire["fire_id"], "payload": fire["payload"]})
            if fire["job_id"] == scheduled["result"]["job_id"]:
                stream.stopped.set()
                return 0
        step("reminder", {"arrived": False})
        return 1
    except GatewayError as error:
        # 401: no or unknown token; 403 identity_mismatch: the token is another agent's. Retrying changes nothing.
        step("refused", {"status": error.status, "reason": error.body.get("reason")})
        return 1


if __name__ == "__main__":
    sys.exit(main())
