//! The mailbox side of an agent's reminder stream (docs/api.md, "Replay of an agent's reminders"): where its replay
//! starts, which fires it has sent, when it catches up, and the frames of replayed fires.

use std::collections::{HashMap, HashSet, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use gateway_core::runtime::sync::lock;
use gateway_core::{AgentId, FiredReminder, ReplaySource};
#[cfg(feature = "redis")]
use tokio::sync::watch;
use tokio::time::Instant;

use super::outbox::Receipts;
use crate::PublishedEvent;
#[cfg(feature = "redis")]
use crate::bridge::BridgeStatus;

/// After connecting, a stream reads its agent's unreceived fires again this long after, and again after the second
/// delay: a fire published just before the stream subscribed reaches the mailbox only when its completion is
/// written (milliseconds later, or after the store recovered from an error).
pub const CATCH_UPS_AFTER_CONNECT: [Duration; 2] = [Duration::from_secs(1), Duration::from_secs(15)];
/// How many of the fires it sent a stream remembers, so as not to send them again: a live event it has replayed,
/// or a fire a catch-up finds unreceived because its receipt is still queued. More than the bus queues for one
/// subscriber (1,024 events), which bounds how far back a live duplicate can be.
pub const SENT_REMEMBERED: usize = 4_096;

/// The frame of a replayed fire: the frame its live event had, byte for byte.
pub fn frame(reminder: &FiredReminder) -> Bytes {
    PublishedEvent::of(&reminder.event()).frame().clone()
}

/// One fire as agent streams hold it until their client has taken it: its frame, and its reminder for the receipt.
#[derive(Debug)]
pub struct SharedFire {
    pub frame: Bytes,
    pub reminder: Arc<FiredReminder>,
}

/// The fires that agent streams hold right now, one copy each for every stream of the process: an agent with many
/// streams (or a client that reconnects again and again) would otherwise hold a replayed reminder once per stream,
/// read and formatted by each (docs/benchmarks.md, "Stream memory"). Entries are weak: a fire no stream holds any
/// more is gone, and its entry is swept when the table has doubled since the last sweep.
#[derive(Debug, Default)]
pub struct SharedFires {
    table: Mutex<FireTable>,
}

#[derive(Debug, Default)]
struct FireTable {
    by_id: HashMap<Arc<str>, Weak<SharedFire>>,
    sweep_at: usize,
}

/// The table is swept of gone fires no earlier than at this size.
const SWEEP_AT_LEAST: usize = 64;

impl SharedFires {
    /// A live reminder event on the topic of `agent_id`: its frame is the bus's own, its reminder is parsed once for
    /// all streams. `None` for an event that is not a reminder of that agent (it is then sent as any event, and
    /// reported received nowhere).
    pub fn live(&self, agent_id: &AgentId, event: &PublishedEvent) -> Option<Arc<SharedFire>> {
        let made = self.get_or_make(agent_id, event.id(), || {
            let reminder = FiredReminder::from_event_json(event.json()).ok_or(())?;
            if reminder.agent_id != *agent_id {
                return Err(());
            }
            Ok::<_, ()>(SharedFire { frame: event.frame().clone(), reminder: Arc::new(reminder) })
        });
        made.ok()
    }

    /// A fire read from the mailbox: the copy a stream holds already when there is one, else this one, formatted.
    pub fn replayed(&self, reminder: FiredReminder) -> Arc<SharedFire> {
        let (agent_id, fire_id) = (reminder.agent_id.clone(), reminder.fire_id.clone());
        let made = self.get_or_make(&agent_id, &fire_id, || {
            Ok::<_, Infallible>(SharedFire { frame: frame(&reminder), reminder: Arc::new(reminder) })
        });
        match made {
            Ok(fire) => fire,
            Err(never) => match never {},
        }
    }

    /// The copy of `fire_id` held for `agent_id`'s streams, or a new one. A copy held for another agent (an event
    /// naming another agent's fire id) is never handed out: each agent's streams see only their own fires.
    fn get_or_make<E>(
        &self,
        agent_id: &AgentId,
        fire_id: &str,
        make: impl FnOnce() -> Result<SharedFire, E>,
    ) -> Result<Arc<SharedFire>, E> {
        let held = |table: &FireTable| table.by_id.get(fire_id).and_then(Weak::upgrade);
        let theirs = |fire: &Arc<SharedFire>| fire.reminder.agent_id != *agent_id;
        match held(&lock(&self.table)) {
            Some(fire) if theirs(&fire) => return make().map(Arc::new),
            Some(fire) => return Ok(fire),
            None => {}
        }
        // Made outside the lock: formatting a large reminder must not hold up every other stream.
        let made = Arc::new(make()?);
        let mut table = lock(&self.table);
        match held(&table) {
            Some(fire) if theirs(&fire) => return Ok(made),
            Some(fire) => return Ok(fire),
            None => {}
        }
        if table.by_id.len() >= table.sweep_at {
            table.by_id.retain(|_, fire| fire.strong_count() > 0);
            table.sweep_at = (table.by_id.len() * 2).max(SWEEP_AT_LEAST);
        }
        table.by_id.insert(Arc::from(fire_id), Arc::downgrade(&made));
        Ok(made)
    }

    /// Fires in the table, gone ones included until the next sweep.
    #[cfg(test)]
    fn entries(&self) -> usize {
        lock(&self.table).by_id.len()
    }
}

/// After a mailbox read failed, a stream tries again this much later.
pub const CATCH_UP_RETRY: Duration = Duration::from_secs(5);

/// What one agent stream keeps about its mailbox.
#[derive(Debug)]
pub struct AgentMailbox<S: ReplaySource> {
    pub(crate) source: S,
    /// Where the stream gets the one copy of each fire that every stream of the process holds.
    pub(crate) fires: Arc<SharedFires>,
    pub(crate) agent_id: AgentId,
    last_event_id: Option<String>,
    /// Opened with the operator's token (the console's live tail): the stream sees the agent's reminders, replayed
    /// ones too, and marks none received, so the agent still gets each of them replayed.
    observer: bool,
    sent: SentFires,
    /// The fire this stream sent last.
    last_sent: Option<String>,
    /// When catch-ups of the unreceived fires are due (in no order; the soonest is the next).
    catch_ups: Vec<Instant>,
    /// The stream missed events (it skipped some, or the event bridge lost some): a catch-up is due (at once, or
    /// after a failed read a little later), from the fire it had sent last before (`None`: it had sent none).
    missed_after: Option<(Instant, Option<String>)>,
}

impl<S: ReplaySource> AgentMailbox<S> {
    /// The mailbox of `agent_id`'s stream, replayed from `source` after `last_event_id` (the `Last-Event-ID` the
    /// client sent; see [`ReplaySource`]), each fire shared through `fires` while the stream holds it.
    pub fn new(source: S, fires: Arc<SharedFires>, agent_id: AgentId, last_event_id: Option<String>) -> Self {
        Self {
            source,
            fires,
            agent_id,
            last_event_id,
            observer: false,
            sent: SentFires::default(),
            last_sent: None,
            catch_ups: Vec::new(),
            missed_after: None,
        }
    }

    /// The stream is an observer's: it marks nothing received.
    #[must_use]
    pub fn observed(self) -> Self {
        Self { observer: true, ..self }
    }

    /// Where the stream reports what its client has taken; `None` for an observer.
    pub(crate) fn receipts(&self) -> Option<Receipts> {
        let source = self.source.clone();
        let received = Box::new(move |receipt| source.received(receipt));
        (!self.observer).then(|| Receipts { received, agent_id: self.agent_id.clone() })
    }

    /// Where the stream's first replay starts.
    pub(crate) async fn replay(&self) -> Result<S::Cursor, S::Error> {
        self.source.replay(self.agent_id.clone(), self.last_event_id.as_deref()).await
    }

    /// The first replay is done: the catch-ups after connecting are due from now.
    pub(crate) fn replayed(&mut self) {
        let now = Instant::now();
        self.catch_ups.extend(CATCH_UPS_AFTER_CONNECT.iter().map(|delay| now + *delay));
    }

    /// The stream skipped events, or the event bridge lost some: catch up at once, on everything fired after the
    /// last fire it sent. Not only the unreceived ones: another stream of the same agent may have received what this
    /// one missed.
    pub(crate) fn missed_events(&mut self) {
        if self.missed_after.is_none() {
            self.missed_after = Some((Instant::now(), self.last_sent.clone()));
        }
    }

    /// A read of the mailbox failed: try again a little later.
    pub(crate) fn read_failed(&mut self) {
        self.catch_ups.push(Instant::now() + CATCH_UP_RETRY);
    }

    /// When the next catch-up is due.
    pub(crate) fn next_catch_up(&self) -> Option<Instant> {
        let missed = self.missed_after.as_ref().map(|(due, _)| *due);
        self.catch_ups.iter().copied().chain(missed).min()
    }

    /// The replay of the catch-up due now, which stands for every one due by now: after missed events, the
    /// unreceived fires up to the last one sent and every fire after it; otherwise the unreceived fires.
    pub(crate) async fn due_catch_up(&mut self) -> Result<S::Cursor, S::Error> {
        let now = Instant::now();
        self.catch_ups.retain(|due| *due > now);
        let after = match self.missed_after.take() {
            Some((due, after)) if due <= now => after,
            not_due => {
                self.missed_after = not_due;
                None
            }
        };
        let Some(fire_id) = after else { return Ok(self.source.unreceived(self.agent_id.clone())) };
        let replay = self.source.replay(self.agent_id.clone(), Some(&fire_id)).await;
        if replay.is_err() {
            self.missed_after = Some((now + CATCH_UP_RETRY, Some(fire_id)));
        }
        replay
    }

    pub(crate) fn was_sent(&self, fire_id: &str) -> bool {
        self.sent.contains(fire_id)
    }

    pub(crate) fn sent(&mut self, fire_id: &str) {
        self.sent.insert(fire_id);
        self.last_sent = Some(fire_id.to_owned());
    }
}

/// The event bridge's state, for the streams of an instance that shares events through Redis: a grown
/// `reconnects` says events from other instances may have been lost in the gap.
#[cfg(feature = "redis")]
#[derive(Debug)]
pub struct BridgeWatch {
    status: watch::Receiver<BridgeStatus>,
    seen: u64,
}

#[cfg(feature = "redis")]
impl BridgeWatch {
    /// Reconnects before the stream existed are no gap of its own.
    pub fn new(status: watch::Receiver<BridgeStatus>) -> Self {
        let seen = status.borrow().reconnects;
        Self { status, seen }
    }

    /// Resolves when the bridge has reconnected since the last time this resolved; never once the bridge is gone.
    pub(crate) async fn reconnected(&mut self) {
        let seen = self.seen;
        let reconnects = self.status.wait_for(|status| status.reconnects > seen).await.map(|status| status.reconnects);
        match reconnects {
            Ok(reconnects) => self.seen = reconnects,
            Err(_) => std::future::pending().await,
        }
    }
}

/// Without the bridge (the `redis` feature off) no stream has one.
#[cfg(not(feature = "redis"))]
#[derive(Debug)]
pub struct BridgeWatch(Infallible);

#[cfg(not(feature = "redis"))]
impl BridgeWatch {
    pub(crate) async fn reconnected(&mut self) {
        match self.0 {}
    }
}

/// The last [`SENT_REMEMBERED`] fire ids a stream sent.
#[derive(Debug, Default)]
struct SentFires {
    order: VecDeque<Arc<str>>,
    ids: HashSet<Arc<str>>,
}

impl SentFires {
    fn contains(&self, fire_id: &str) -> bool {
        self.ids.contains(fire_id)
    }

    fn insert(&mut self, fire_id: &str) {
        if self.ids.contains(fire_id) {
            return;
        }
        let id: Arc<str> = Arc::from(fire_id);
        self.ids.insert(Arc::clone(&id));
        self.order.push_back(id);
        if self.order.len() > SENT_REMEMBERED
            && let Some(oldest) = self.order.pop_front()
        {
            self.ids.remove(&oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_stream_remembers_the_fires_it_sent_last() {
        let mut sent = SentFires::default();
        for n in 0..SENT_REMEMBERED + 10 {
            sent.insert(&format!("{n}:x"));
        }
        sent.insert("20:x");
        assert!(!sent.contains("9:x"), "the oldest are forgotten");
        assert!(sent.contains("10:x") && sent.contains(&format!("{}:x", SENT_REMEMBERED + 9)));
        assert_eq!((sent.order.len(), sent.ids.len()), (SENT_REMEMBERED, SENT_REMEMBERED));
    }

    fn reminder(n: i64) -> FiredReminder {
        let at = time::macros::datetime!(2026-02-22 12:00:00 UTC) + time::Duration::seconds(n);
        let mut payload = serde_json::Map::new();
        payload.insert("note".into(), serde_json::Value::String("x".repeat(1_000)));
        FiredReminder {
            fire_id: gateway_core::ports::mailbox::fire_id(n, at),
            job_id: n,
            agent_id: AgentId::new("agent-7").unwrap(),
            payload,
            scheduled_for: at,
            fired_at: at,
            epoch: 1,
        }
    }

    #[test]
    fn streams_that_hold_a_fire_at_once_hold_one_copy_of_it() {
        let fires = SharedFires::default();
        let first = fires.replayed(reminder(1));
        let again = fires.replayed(reminder(1));
        assert!(Arc::ptr_eq(&first, &again), "a second read of a held fire is the first copy");
        assert_eq!(first.frame, frame(&reminder(1)), "the frame its live event had");

        let live = PublishedEvent::of(&reminder(2).event());
        let agent = AgentId::new("agent-7").unwrap();
        let from_bus = fires.live(&agent, &live).unwrap();
        assert_eq!(from_bus.frame.as_ptr(), live.frame().as_ptr(), "a live fire keeps the bus's frame");
        assert_eq!(*from_bus.reminder, reminder(2));
        assert!(Arc::ptr_eq(&from_bus, &fires.replayed(reminder(2))), "and a replay of it while held shares it");

        let other = gateway_core::Event::with_id(
            "e-1".to_owned(),
            gateway_core::EventPayload::WebhookSignatureFailure { webhook_id: 1 },
            time::macros::datetime!(2026-02-22 12:00:00 UTC),
        );
        assert!(fires.live(&agent, &PublishedEvent::of(&other)).is_none(), "not a reminder");
        let someone_else = AgentId::new("agent-8").unwrap();
        assert!(fires.live(&someone_else, &live).is_none(), "a reminder of another agent is not this agent's fire");

        drop((first, again));
        let fresh = fires.replayed(reminder(1));
        assert_eq!(*fresh.reminder, reminder(1), "a fire nobody holds is read afresh");
        assert_eq!(fires.entries(), 2, "one entry per fire");

        // A copy held for agent-8's streams is never handed to agent-7's, whatever fire id an event names.
        let theirs = FiredReminder { agent_id: someone_else.clone(), ..reminder(3) };
        let held = fires.replayed(theirs);
        let mine = fires.live(&agent, &PublishedEvent::of(&reminder(3).event())).unwrap();
        assert!(!Arc::ptr_eq(&held, &mine));
        assert_eq!((held.reminder.agent_id.as_str(), mine.reminder.agent_id.as_str()), ("agent-8", "agent-7"));
    }

    #[test]
    fn fires_no_stream_holds_are_swept_from_the_table() {
        let fires = SharedFires::default();
        let held: Vec<Arc<SharedFire>> = (0..10).map(|n| fires.replayed(reminder(n))).collect();
        for n in 10..1_000 {
            drop(fires.replayed(reminder(n)));
        }
        assert!(fires.entries() < 2 * SWEEP_AT_LEAST + held.len(), "{} entries for 10 held fires", fires.entries());
        for fire in &held {
            assert!(Arc::ptr_eq(fire, &fires.replayed((*fire.reminder).clone())), "held fires stay shared");
        }
    }
}
