//! The replay port: where a stream of `agent:<id>:scheduled` reads the reminders its agent has not received yet
//! (docs/api.md, "Replay of an agent's reminders") and reports those its client has taken.
//!
//! gateway-cron's `Mailbox` implements it over the [`MailboxStore`](crate::MailboxStore) (reads in turns, receipts
//! written in batches off the stream's path); gateway-pubsub's event stream consumes it. The port keeps those two
//! components apart: neither depends on the other. Unlike the store ports it is asynchronous, because its
//! implementation waits for a turn to read and reads on the blocking pool.
//!
//! [`InMemoryReplaySource`] is its fake: fires recorded by hand, receipts marked at once.

use std::collections::HashSet;
use std::convert::Infallible;
use std::fmt::{Debug, Display};
use std::future::Future;
use std::sync::{Arc, Mutex};

use crate::ids::AgentId;
use crate::ports::mailbox::{FiredReminder, Receipt};
use crate::runtime::sync::lock;

/// Where agent streams replay from: a replay starts with the fires no stream has received and, after a
/// `Last-Event-ID` naming a retained fire, goes on with every fire after that one (an id that names none:
/// everything retained), in firing order.
pub trait ReplaySource: Clone + Debug + Send + Sync + 'static {
    /// Where one replay stands.
    type Cursor: Send;
    type Error: Display + Send;

    /// Where a stream of `agent_id`'s reminders starts (see the trait).
    fn replay(
        &self,
        agent_id: AgentId,
        last_event_id: Option<&str>,
    ) -> impl Future<Output = Result<Self::Cursor, Self::Error>> + Send;

    /// A replay of the fires of `agent_id` that no stream has received, in firing order.
    fn unreceived(&self, agent_id: AgentId) -> Self::Cursor;

    /// The next fires of the replay, in firing order, at most `limit` (at least one is asked for); empty once done.
    fn next_page(
        &self,
        cursor: &mut Self::Cursor,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<FiredReminder>, Self::Error>> + Send;

    /// A stream handed the fire to its client: it is received. Never waits.
    fn received(&self, receipt: Receipt);
}

/// The in-memory [`ReplaySource`]: the fires [`record`](Self::record)ed, in that order, and which were received. A
/// receipt that names no recorded fire is kept, and marks the fire when it is recorded (as the mailbox holds a
/// receipt that came before its fire's completion).
#[derive(Debug, Clone, Default)]
pub struct InMemoryReplaySource {
    inner: Arc<Mutex<Fires>>,
}

#[derive(Debug, Default)]
struct Fires {
    recorded: Vec<FiredReminder>,
    received: HashSet<Receipt>,
}

impl Fires {
    fn is_received(&self, fire: &FiredReminder) -> bool {
        self.received.contains(&Receipt { agent_id: fire.agent_id.clone(), fire_id: fire.fire_id.clone() })
    }
}

/// Where a replay of [`InMemoryReplaySource`] stands: the unreceived fires up to `through` (a position; all when
/// `None`), then, when `then_every`, every fire after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InMemoryCursor {
    agent_id: AgentId,
    unreceived_through: Option<Option<usize>>,
    then_every: bool,
    /// Fires before this position are behind the replay.
    next: usize,
}

impl InMemoryReplaySource {
    /// Records a fire, as the completion that publishes it does.
    pub fn record(&self, fire: FiredReminder) {
        lock(&self.inner).recorded.push(fire);
    }

    /// `agent_id`'s fires, each with whether it was received.
    pub fn fires(&self, agent_id: &AgentId) -> Vec<(FiredReminder, bool)> {
        let fires = lock(&self.inner);
        let mine = fires.recorded.iter().filter(|fire| fire.agent_id == *agent_id);
        mine.map(|fire| (fire.clone(), fires.is_received(fire))).collect()
    }

    /// `agent_id`'s fires that no stream has received.
    pub fn unreceived_fires(&self, agent_id: &AgentId) -> Vec<FiredReminder> {
        let fires = self.fires(agent_id).into_iter();
        fires.filter(|(_, received)| !received).map(|(fire, _)| fire).collect()
    }
}

impl ReplaySource for InMemoryReplaySource {
    type Cursor = InMemoryCursor;
    type Error = Infallible;

    async fn replay(&self, agent_id: AgentId, last_event_id: Option<&str>) -> Result<InMemoryCursor, Infallible> {
        let Some(fire_id) = last_event_id else { return Ok(self.unreceived(agent_id)) };
        let position =
            lock(&self.inner).recorded.iter().position(|fire| fire.agent_id == agent_id && fire.fire_id == fire_id);
        Ok(match position {
            Some(position) => {
                InMemoryCursor { agent_id, unreceived_through: Some(Some(position)), then_every: true, next: 0 }
            }
            None => InMemoryCursor { agent_id, unreceived_through: None, then_every: true, next: 0 },
        })
    }

    fn unreceived(&self, agent_id: AgentId) -> InMemoryCursor {
        InMemoryCursor { agent_id, unreceived_through: Some(None), then_every: false, next: 0 }
    }

    async fn next_page(&self, cursor: &mut InMemoryCursor, limit: usize) -> Result<Vec<FiredReminder>, Infallible> {
        let fires = lock(&self.inner);
        let mut page = Vec::new();
        while page.len() < limit.max(1) && cursor.next < fires.recorded.len() {
            let position = cursor.next;
            let fire = &fires.recorded[position];
            let wanted = match cursor.unreceived_through {
                Some(through) if through.is_none_or(|through| position <= through) => !fires.is_received(fire),
                Some(_) if cursor.then_every => {
                    cursor.unreceived_through = None;
                    true
                }
                Some(_) => break,
                None => true,
            };
            cursor.next += 1;
            if wanted && fire.agent_id == cursor.agent_id {
                page.push(fire.clone());
            }
        }
        Ok(page)
    }

    fn received(&self, receipt: Receipt) {
        lock(&self.inner).received.insert(receipt);
    }
}
