//! The reminder mailbox port (`agent_mailbox`, docs/scheduler.md "The mailbox"): every fire the scheduler
//! published, kept for its agent for a while, so that an agent that was offline when a reminder fired still gets
//! it when it connects.
//!
//! A fire is recorded by the write that completes it ([`crate::CronJobStore::complete_fires`]), which is why the
//! in-memory implementation is [`crate::InMemoryCronJobStore`] itself: its rows and its mailbox change under one
//! lock, as the database changes them in one transaction. Entries are numbered in the order they were recorded
//! (`seq`), and each write records its fires in firing order (by `fired_at`, ties by `fire_id`), so `seq` is the
//! firing order; an entry is *received* once some stream has handed it to a client.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;
use serde_json::{Map, Value};
use time::OffsetDateTime;

use crate::ids::AgentId;
use crate::ports::event::{Event, EventPayload};
use crate::ports::store::StoreError;

/// The `fire_id` of one instant of one job: `"<job_id>:<scheduled_for as RFC 3339 UTC>"`. It is also the
/// reminder event's id, so a refire after a crash carries the same id and consumers can deduplicate.
pub fn fire_id(job_id: i64, scheduled_for: OffsetDateTime) -> String {
    format!("{job_id}:{}", crate::encoding::rfc3339::format_exact(scheduled_for))
}

/// One published fire of one job: what the `reminder` event carried, and what the mailbox keeps.
#[derive(Debug, Clone, PartialEq)]
pub struct FiredReminder {
    /// `"<job_id>:<scheduled_for>"`: the event's id, unique per instant of a job.
    pub fire_id: String,
    pub job_id: i64,
    pub agent_id: AgentId,
    pub payload: Map<String, Value>,
    pub scheduled_for: OffsetDateTime,
    /// When it was published: the event's `timestamp`.
    pub fired_at: OffsetDateTime,
    /// The leadership term (fencing token) it was published under: the event's `epoch`, so that an agent can tell a
    /// deposed leader's fire (docs/agents.md, "Fencing"). 0 for fires recorded before terms were.
    pub epoch: u64,
}

impl FiredReminder {
    /// The `reminder` event of this fire, as the scheduler publishes it and a stream replays it.
    pub fn event(&self) -> Event {
        Event::with_id(
            self.fire_id.clone(),
            EventPayload::Reminder {
                job_id: self.job_id,
                agent_id: self.agent_id.clone(),
                scheduled_for: self.scheduled_for,
                payload: self.payload.clone(),
                fire_id: self.fire_id.clone(),
                epoch: self.epoch,
            },
            self.fired_at,
        )
    }

    /// Reads a fire back from its `reminder` event's JSON (as a stream receives it from the bus); `None` for
    /// anything else.
    pub fn from_event_json(json: &str) -> Option<Self> {
        #[derive(Deserialize)]
        struct Reminder {
            event_type: String,
            #[serde(with = "crate::encoding::rfc3339::serde")]
            timestamp: OffsetDateTime,
            job_id: i64,
            agent_id: String,
            #[serde(with = "crate::encoding::rfc3339::serde")]
            scheduled_for: OffsetDateTime,
            payload: Map<String, Value>,
            fire_id: String,
            // An instance of an older version sends none.
            #[serde(default)]
            epoch: u64,
        }
        let reminder: Reminder = serde_json::from_str(json).ok()?;
        (reminder.event_type == "reminder").then_some(())?;
        Some(Self {
            fire_id: reminder.fire_id,
            job_id: reminder.job_id,
            agent_id: AgentId::new(reminder.agent_id).ok()?,
            payload: reminder.payload,
            scheduled_for: reminder.scheduled_for,
            fired_at: reminder.timestamp,
            epoch: reminder.epoch,
        })
    }
}

/// One entry of an agent's mailbox.
#[derive(Debug, Clone, PartialEq)]
pub struct MailboxEntry {
    /// Its place in firing order: entries recorded later have a greater `seq`.
    pub seq: i64,
    pub reminder: FiredReminder,
    /// When a stream first handed it to a client; `None` while no stream has.
    pub received_at: Option<OffsetDateTime>,
}

/// Which entries of one agent's mailbox a read returns: those with `after < seq <= through`, in firing order, at
/// most `limit`; only the unreceived ones when `unreceived_only`. `after` is the cursor of keyset paging (0 from
/// the start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MailboxQuery {
    pub agent_id: AgentId,
    pub unreceived_only: bool,
    pub after: i64,
    pub through: Option<i64>,
    pub limit: usize,
}

/// A stream's report that it handed a fire to its client: the agent whose stream it was (never what the event it
/// sent says: the event may have come from elsewhere) and the fire's id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Receipt {
    pub agent_id: AgentId,
    pub fire_id: String,
}

/// Durable storage of the mailbox. Fires are recorded by the cron port's completions, and only by them; this port
/// reads them, marks them received and prunes them.
pub trait MailboxStore: Send + Sync + std::fmt::Debug {
    /// The `seq` of `fire_id` in `agent_id`'s mailbox; `None` when no retained entry of that agent has it.
    fn mailbox_position(&self, agent_id: &AgentId, fire_id: &str) -> Result<Option<i64>, StoreError>;
    /// The entries `query` selects, by ascending `seq`.
    fn mailbox_entries(&self, query: &MailboxQuery) -> Result<Vec<MailboxEntry>, StoreError>;
    /// Marks received at `at` each entry a receipt names: its fire id, in the mailbox of the receipt's agent. An
    /// entry received already keeps its first `received_at`. A receipt records nothing: one that names no entry of
    /// its agent (a fire whose completion is not written yet, since a stream can get the live event first; or no
    /// fire at all) marks nothing, and its index is returned, in ascending order, so that the caller may try it
    /// again later.
    fn mark_received(&self, receipts: &[Receipt], at: OffsetDateTime) -> Result<Vec<usize>, StoreError>;
    /// The `seq` of the newest entry of any agent; 0 when the mailbox is empty.
    fn mailbox_head(&self) -> Result<i64, StoreError>;
    /// Every agent's entries with `seq > after`, and those whose `seq` is in `also` (numbers below `after` that a
    /// reader has not seen yet), by ascending `seq`, at most `limit`: what an instance's streams may have missed.
    fn mailbox_since(&self, after: i64, also: &[i64], limit: usize) -> Result<Vec<MailboxEntry>, StoreError>;
    /// Of the first `limit` entries in firing order, deletes those fired before `fired_before`; returns how many. A
    /// pruning pass calls it until it deletes nothing: firing order is (nearly) the order of `fired_at`, so the
    /// oldest entries are at the start, and no index on `fired_at` is needed for a cutoff.
    fn prune_mailbox(&self, fired_before: OffsetDateTime, limit: usize) -> Result<usize, StoreError>;
}

/// `reminders` in the order every write takes them: by `fired_at`, ties by `fire_id`. It is the firing order the
/// entries are numbered in, and in a database with row locks it is also what keeps writers from deadlocking: a
/// completion and a mark (or two marks) that touch the same fires take their locks in the same order.
pub fn in_firing_order<R: Borrow<FiredReminder>>(reminders: &[R]) -> Vec<&FiredReminder> {
    let mut ordered: Vec<&FiredReminder> = reminders.iter().map(Borrow::borrow).collect();
    ordered.sort_by(|a, b| (a.fired_at, &a.fire_id).cmp(&(b.fired_at, &b.fire_id)));
    ordered
}

/// The mailbox of [`crate::InMemoryCronJobStore`], kept beside its rows.
#[derive(Debug, Default)]
pub(crate) struct MailboxRows {
    last_seq: i64,
    entries: BTreeMap<i64, MailboxEntry>,
    by_fire_id: HashMap<String, i64>,
}

impl MailboxRows {
    /// Records `reminder` unless its fire is recorded already (`ON CONFLICT (fire_id) DO NOTHING`).
    pub(crate) fn record(&mut self, reminder: &FiredReminder) -> i64 {
        if let Some(seq) = self.by_fire_id.get(&reminder.fire_id) {
            return *seq;
        }
        self.last_seq += 1;
        let seq = self.last_seq;
        self.by_fire_id.insert(reminder.fire_id.clone(), seq);
        self.entries.insert(seq, MailboxEntry { seq, reminder: reminder.clone(), received_at: None });
        seq
    }

    /// The sum of `charge` over `agent_id`'s entries' payloads.
    pub(crate) fn charged_bytes(&self, agent_id: &AgentId, charge: impl Fn(&Map<String, Value>) -> u64) -> u64 {
        self.entries
            .values()
            .filter(|entry| entry.reminder.agent_id == *agent_id)
            .map(|e| charge(&e.reminder.payload))
            .sum()
    }

    /// The entries of job `job_id`, in firing order.
    pub(crate) fn of_job(&self, job_id: i64) -> impl Iterator<Item = &MailboxEntry> {
        self.entries.values().filter(move |entry| entry.reminder.job_id == job_id)
    }

    pub(crate) fn position(&self, agent_id: &AgentId, fire_id: &str) -> Option<i64> {
        let seq = *self.by_fire_id.get(fire_id)?;
        self.entries.get(&seq).filter(|entry| entry.reminder.agent_id == *agent_id).map(|entry| entry.seq)
    }

    pub(crate) fn select(&self, query: &MailboxQuery) -> Vec<MailboxEntry> {
        let start = query.after.saturating_add(1);
        let end = query.through.unwrap_or(i64::MAX);
        if start > end {
            return Vec::new();
        }
        self.entries
            .range(start..=end)
            .map(|(_, entry)| entry)
            .filter(|entry| entry.reminder.agent_id == query.agent_id)
            .filter(|entry| !query.unreceived_only || entry.received_at.is_none())
            .take(query.limit)
            .cloned()
            .collect()
    }

    pub(crate) fn mark_received(&mut self, receipts: &[Receipt], at: OffsetDateTime) -> Vec<usize> {
        let mut unknown = Vec::new();
        for (index, receipt) in receipts.iter().enumerate() {
            let seq = self.position(&receipt.agent_id, &receipt.fire_id);
            match seq.and_then(|seq| self.entries.get_mut(&seq)) {
                Some(entry) => {
                    entry.received_at.get_or_insert(at);
                }
                None => unknown.push(index),
            }
        }
        unknown
    }

    pub(crate) fn head(&self) -> i64 {
        self.entries.last_key_value().map_or(0, |(seq, _)| *seq)
    }

    pub(crate) fn since(&self, after: i64, also: &[i64], limit: usize) -> Vec<MailboxEntry> {
        let mut seqs: Vec<i64> = also.iter().copied().filter(|seq| self.entries.contains_key(seq)).collect();
        seqs.extend(self.entries.range(after.saturating_add(1)..).map(|(seq, _)| *seq).take(limit));
        seqs.sort_unstable();
        seqs.dedup();
        seqs.into_iter().take(limit).filter_map(|seq| self.entries.get(&seq).cloned()).collect()
    }

    pub(crate) fn prune(&mut self, fired_before: OffsetDateTime, limit: usize) -> usize {
        let old: Vec<i64> = self
            .entries
            .values()
            .take(limit)
            .filter(|entry| entry.reminder.fired_at < fired_before)
            .map(|entry| entry.seq)
            .collect();
        for seq in &old {
            if let Some(entry) = self.entries.remove(seq) {
                self.by_fire_id.remove(&entry.reminder.fire_id);
            }
        }
        old.len()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use time::macros::datetime;

    use super::*;

    #[test]
    fn a_reminder_reads_back_from_its_event_json_and_nothing_else_does() {
        let reminder = FiredReminder {
            fire_id: "7:2026-02-22T12:00:05.25Z".to_owned(),
            job_id: 7,
            agent_id: AgentId::new("agent-7").unwrap(),
            payload: json!({"task": "check_quota", "n": [1, 2]}).as_object().cloned().unwrap(),
            scheduled_for: datetime!(2026-02-22 12:00:05.25 UTC),
            // Whole milliseconds, as every fire is stamped: the text an event carries keeps no more.
            fired_at: datetime!(2026-02-22 12:00:05.251 UTC),
            epoch: 9,
        };
        let json = reminder.event().to_json();
        assert!(json.contains(r#""epoch":9"#), "{json}");
        assert_eq!(FiredReminder::from_event_json(&json), Some(reminder.clone()));
        let eviction = Event::with_id(
            "e",
            EventPayload::WebhookSignatureFailure { webhook_id: 1 },
            datetime!(2026-02-22 12:00:00 UTC),
        );
        assert_eq!(FiredReminder::from_event_json(&eviction.to_json()), None);
        assert_eq!(FiredReminder::from_event_json("not json"), None);
        let other_type = json.replace("\"reminder\"", "\"decision_log\"");
        assert_eq!(FiredReminder::from_event_json(&other_type), None);
    }
}
