//! Rules every [`AgentStorage`] must keep: an agent is charged for its recorded tool answers, its jobs (pending
//! one-time reminders and recurring jobs) and its mailbox entries, each the bytes of its JSON plus
//! [`STORED_ROW_CHARGE_BYTES`], and for nothing else (other agents' rows); a fire moves a one-time job's charge from
//! its row to the mailbox entry; pruning takes it off. The rules write through the other ports of the same store, so a suite gets all four.

use serde_json::{Map, Value, json};
use time::{Duration, OffsetDateTime};

use crate::conformance::cron::lease;
use crate::ports::cron::{FireCompletion, FireKey};
use crate::{
    AgentId, AgentStorage, CronJobStore, FiredReminder, MailboxStore, NewCronJob, STORED_ROW_CHARGE_BYTES, ToolCallId,
    ToolCallRecord, ToolCallStore,
};

/// The ports of one store that a rule drives: the usage it checks and the ports that write the rows it counts.
#[derive(Debug)]
pub struct StorageParts<'a> {
    pub usage: &'a dyn AgentStorage,
    pub jobs: &'a dyn CronJobStore,
    pub mailbox: &'a dyn MailboxStore,
    pub calls: &'a dyn ToolCallStore,
}

fn agent(name: &str) -> AgentId {
    AgentId::new(name).expect("a valid agent id")
}

fn object(value: Value) -> Map<String, Value> {
    value.as_object().cloned().expect("an object")
}

/// The charge of a row whose JSON is `value`'s compact text.
fn charge(value: &impl serde::Serialize) -> u64 {
    let bytes = serde_json::to_string(value).expect("serializable").len();
    u64::try_from(bytes).expect("small") + STORED_ROW_CHARGE_BYTES
}

fn one_time(agent_id: &str, payload: Map<String, Value>, at: OffsetDateTime) -> NewCronJob {
    NewCronJob {
        agent_id: agent(agent_id),
        schedule: None,
        next_fire_at: at,
        payload,
        is_one_time: true,
        idempotency_key: None,
        timezone: crate::DEFAULT_TIMEZONE.to_owned(),
        misfire_policy: crate::MisfirePolicy::FireOnce,
        max_lateness_ms: None,
    }
}

fn answer(agent_id: &str, id: &str, result: Value, at: OffsetDateTime) -> ToolCallRecord {
    ToolCallRecord {
        agent_id: agent(agent_id),
        tool_call_id: ToolCallId::new(id).expect("a valid tool call id"),
        tool_name: "schedule_reminder".to_owned(),
        params_hash: format!("sha256:{}", "0".repeat(64)),
        result,
        created_at: at,
    }
}

/// An agent with nothing stored is charged 0. Its answers, pending reminders and mailbox entries are each charged
/// their JSON's bytes (not characters: a payload of non-ASCII text counts each byte) plus the row charge, and so is a
/// recurring job of its own (agents create them with `schedule_recurring`); another agent's rows are not charged to
/// it. Expects an empty store.
pub fn an_agent_is_charged_for_its_answers_pending_reminders_and_mailbox(parts: &StorageParts<'_>, at: OffsetDateTime) {
    let a = agent("agent-a");
    assert_eq!(parts.usage.agent_storage_bytes(&a).expect("usage"), 0);

    let result = json!({"job_id": 7, "fire_at": "2026-02-22T12:00:05Z"});
    parts.calls.record_tool_call(&answer("agent-a", "call-1", result.clone(), at)).expect("record");
    let mut expected = charge(&result);
    assert_eq!(parts.usage.agent_storage_bytes(&a).expect("usage"), expected);

    let payload = object(json!({"note": "é ü 漢字", "n": [1, 2, 3]}));
    parts.jobs.insert_cron_job(&one_time("agent-a", payload.clone(), at + Duration::minutes(1))).expect("insert");
    expected += charge(&payload);
    assert_eq!(parts.usage.agent_storage_bytes(&a).expect("usage"), expected, "bytes, not characters");

    // Charged: a recurring job of its own, whose row stays as long as the job.
    let recurring = NewCronJob {
        schedule: Some("* * * * *".to_owned()),
        is_one_time: false,
        ..one_time("agent-a", object(json!({"big": "x".repeat(1_000)})), at)
    };
    parts.jobs.insert_cron_job(&recurring).expect("insert");
    expected += charge(&recurring.payload);
    assert_eq!(parts.usage.agent_storage_bytes(&a).expect("usage"), expected, "a recurring job of its own");

    // Not charged to agent-a: another agent's rows.
    parts.jobs.insert_cron_job(&one_time("agent-b", payload.clone(), at)).expect("insert");
    parts.calls.record_tool_call(&answer("agent-b", "call-1", result.clone(), at)).expect("record");
    assert_eq!(parts.usage.agent_storage_bytes(&a).expect("usage"), expected);
    assert_eq!(parts.usage.agent_storage_bytes(&agent("agent-b")).expect("usage"), charge(&payload) + charge(&result));
}

/// A fired one-time job's charge moves from its pending row to its mailbox entry (the agent is charged the same);
/// a recurring job's fire adds its entry. Pruning the mailbox and the answers takes their charges off. Expects an
/// empty store.
pub fn a_fire_moves_the_charge_to_the_mailbox_and_pruning_takes_it_off(parts: &StorageParts<'_>, at: OffsetDateTime) {
    let a = agent("agent-a");
    let payload = object(json!({"task": "check_quota"}));
    let job = parts.jobs.insert_cron_job(&one_time("agent-a", payload.clone(), at)).expect("insert");
    let recurring = parts
        .jobs
        .insert_cron_job(&NewCronJob {
            schedule: Some("* * * * *".to_owned()),
            is_one_time: false,
            ..one_time("agent-a", object(json!({"every": "minute"})), at)
        })
        .expect("insert");
    let before = parts.usage.agent_storage_bytes(&a).expect("usage");
    assert_eq!(before, charge(&payload) + charge(&recurring.payload));

    let claimed = parts.jobs.claim_fires(&[job.id, recurring.id], &lease("scheduler", 1, at)).expect("claim");
    assert_eq!(claimed.len(), 2);
    let fired = |job: &crate::CronJob| FiredReminder {
        fire_id: crate::ports::mailbox::fire_id(job.id, at),
        job_id: job.id,
        agent_id: a.clone(),
        payload: job.payload.clone(),
        scheduled_for: at,
        fired_at: at + Duration::milliseconds(1),
        epoch: 1,
    };
    let completions = [
        FireCompletion::Delete(FireKey { job_id: job.id, scheduled_for: at }),
        FireCompletion::Advance {
            fire: FireKey { job_id: recurring.id, scheduled_for: at },
            next_fire_at: at + Duration::minutes(1),
        },
    ];
    let fires = [fired(&job), fired(&recurring)];
    assert_eq!(parts.jobs.complete_fires("scheduler", crate::FencingToken(1), &completions, &fires).expect("fire"), 2);
    let after = parts.usage.agent_storage_bytes(&a).expect("usage");
    assert_eq!(after, before + charge(&recurring.payload), "the one-time fire moved, the recurring one added");

    let result = json!({"cancelled": false});
    parts.calls.record_tool_call(&answer("agent-a", "call-1", result.clone(), at)).expect("record");
    assert_eq!(parts.usage.agent_storage_bytes(&a).expect("usage"), after + charge(&result));
    assert_eq!(parts.calls.prune_tool_calls(at + Duration::seconds(1), 10).expect("prune"), 1);
    assert_eq!(parts.mailbox.prune_mailbox(at + Duration::seconds(1), 10).expect("prune"), 2);
    assert_eq!(
        parts.usage.agent_storage_bytes(&a).expect("usage"),
        charge(&recurring.payload),
        "what stays: the recurring job's own row"
    );
}
