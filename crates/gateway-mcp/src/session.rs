//! Sessions: who each is for, what it subscribed to, and its server stream's messages (kept for a resuming
//! client). In memory, per instance: a session id means nothing to another instance (docs/agents.md says what a
//! deployment of several needs: routing that sticks to `Mcp-Session-Id`).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use gateway_core::AgentId;
use gateway_core::runtime::sync::lock;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::server::SubscriptionGuard;
use crate::{
    MAX_SESSIONS, MAX_SESSIONS_PER_AGENT, MAX_SUBSCRIPTIONS_PER_SESSION, McpError, SESSION_IDLE_EXPIRY,
    STREAM_REPLAY_MESSAGES, jsonrpc,
};

/// One client's session.
pub(crate) struct Session {
    pub(crate) id: String,
    pub(crate) agent_id: AgentId,
    pub(crate) protocol_version: &'static str,
    state: Mutex<State>,
    /// Woken when a message is queued, a stream takes over, or the session ends.
    wake: Notify,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The id is a bearer secret of sorts (with the agent's token): never in a log.
        f.debug_struct("Session").field("agent_id", &self.agent_id).finish_non_exhaustive()
    }
}

struct State {
    last_used: Instant,
    ended: bool,
    /// The server stream's latest messages: (event id, SSE frame), oldest first.
    outbox: VecDeque<(u64, Bytes)>,
    /// The id the next message gets (from 1).
    next_event: u64,
    /// The highest id a stream has sent: a new stream without `Last-Event-ID` starts after it.
    delivered: u64,
    /// Which stream is the session's (a new one takes over from the one before).
    stream_generation: u64,
    stream_open: bool,
    subscriptions: HashMap<String, SubscriptionGuard>,
}

impl Session {
    fn new(id: String, agent_id: AgentId, protocol_version: &'static str, now: Instant) -> Self {
        let state = State {
            last_used: now,
            ended: false,
            outbox: VecDeque::new(),
            next_event: 1,
            delivered: 0,
            stream_generation: 0,
            stream_open: false,
            subscriptions: HashMap::new(),
        };
        Self { id, agent_id, protocol_version, state: Mutex::new(state), wake: Notify::new() }
    }

    /// Idle: not used for [`SESSION_IDLE_EXPIRY`] and not holding its stream.
    fn is_expired(&self, now: Instant) -> bool {
        let state = lock(&self.state);
        !state.stream_open && now.saturating_duration_since(state.last_used) >= SESSION_IDLE_EXPIRY
    }

    fn last_used(&self) -> Instant {
        lock(&self.state).last_used
    }

    fn touch(&self, now: Instant) {
        lock(&self.state).last_used = now;
    }

    /// Ends it: its stream ends, its subscriptions are dropped (their guards stop what watched for them).
    pub(crate) fn end(&self) {
        let subscriptions = {
            let mut state = lock(&self.state);
            state.ended = true;
            state.outbox.clear();
            std::mem::take(&mut state.subscriptions)
        };
        drop(subscriptions);
        self.wake.notify_waiters();
    }

    /// Queues `message` on the server stream; false once the session has ended.
    pub(crate) fn send(&self, message: &Value) -> bool {
        {
            let mut state = lock(&self.state);
            if state.ended {
                return false;
            }
            let id = state.next_event;
            state.next_event += 1;
            let frame = format!("id: {id}\nevent: message\ndata: {message}\n\n");
            state.outbox.push_back((id, Bytes::from(frame)));
            if state.outbox.len() > STREAM_REPLAY_MESSAGES {
                state.outbox.pop_front();
            }
        }
        self.wake.notify_waiters();
        true
    }

    /// Subscribes to `uri` (again: the new guard replaces the old). False when the session holds
    /// [`MAX_SUBSCRIPTIONS_PER_SESSION`] others already.
    pub(crate) fn subscribe(&self, uri: String, guard: SubscriptionGuard) -> bool {
        let mut state = lock(&self.state);
        if state.ended
            || (!state.subscriptions.contains_key(&uri) && state.subscriptions.len() >= MAX_SUBSCRIPTIONS_PER_SESSION)
        {
            return false;
        }
        let replaced = state.subscriptions.insert(uri, guard);
        drop(state);
        drop(replaced);
        true
    }

    pub(crate) fn unsubscribe(&self, uri: &str) {
        let removed = lock(&self.state).subscriptions.remove(uri);
        drop(removed);
    }

    /// Opens the session's server stream, ending the one before (a client has one). After `last_event_id` (an
    /// id this stream sent) it replays what followed that id and is still kept; without one, it starts after the
    /// last message any stream of the session sent.
    pub(crate) fn open_stream(self: &Arc<Self>, last_event_id: Option<&str>, now: Instant) -> SessionStream {
        let generation = {
            let mut state = lock(&self.state);
            state.stream_generation += 1;
            state.stream_open = true;
            state.last_used = now;
            state.stream_generation
        };
        self.wake.notify_waiters();
        let cursor = last_event_id
            .and_then(|id| id.trim().parse::<u64>().ok())
            .map_or_else(|| lock(&self.state).delivered.saturating_add(1), |id| id.saturating_add(1));
        SessionStream { session: Arc::clone(self), generation, cursor }
    }
}

/// A session's server stream (`GET /mcp`): its messages as SSE frames, in order.
#[derive(Debug)]
pub struct SessionStream {
    session: Arc<Session>,
    generation: u64,
    /// The id of the next message to send.
    cursor: u64,
}

impl SessionStream {
    /// The next message's SSE frame; `None` once the session has ended or another stream took over.
    pub async fn next(&mut self) -> Option<Bytes> {
        loop {
            let notified = self.session.wake.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            {
                let mut state = lock(&self.session.state);
                if state.ended || state.stream_generation != self.generation {
                    return None;
                }
                let next = state.outbox.iter().find(|(id, _)| *id >= self.cursor).cloned();
                if let Some((id, frame)) = next {
                    self.cursor = id + 1;
                    state.delivered = state.delivered.max(id);
                    state.last_used = Instant::now();
                    return Some(frame);
                }
            }
            notified.await;
        }
    }
}

impl Drop for SessionStream {
    fn drop(&mut self) {
        let mut state = lock(&self.session.state);
        if state.stream_generation == self.generation {
            state.stream_open = false;
            // Its idle time counts from when its stream closed.
            state.last_used = Instant::now();
        }
    }
}

/// What tells a subscribed session that its resource changed: the host calls [`Self::resource_updated`] (from a
/// task of its own) for each change; it holds the session weakly, so it keeps nothing alive.
#[derive(Debug, Clone)]
pub struct ResourceNotifier {
    pub(crate) session: Weak<Session>,
    pub(crate) uri: Arc<str>,
}

impl ResourceNotifier {
    /// Sends `notifications/resources/updated` on the session's stream. False once the session is gone: the
    /// caller stops watching.
    pub fn resource_updated(&self) -> bool {
        let Some(session) = self.session.upgrade() else { return false };
        let message = jsonrpc::notification("notifications/resources/updated", json!({"uri": &*self.uri}));
        session.send(&message)
    }
}

/// Every session of this instance.
#[derive(Debug, Default)]
pub(crate) struct SessionTable {
    sessions: Mutex<HashMap<String, Arc<Session>>>,
}

impl SessionTable {
    /// A new session of `agent_id`, under the caps: the agent's least recently used one ends when it holds
    /// [`MAX_SESSIONS_PER_AGENT`]; [`McpError::TooManySessions`] when the instance holds [`MAX_SESSIONS`] in use.
    pub(crate) fn create(
        &self,
        agent_id: AgentId,
        protocol_version: &'static str,
        now: Instant,
    ) -> Result<Arc<Session>, McpError> {
        let id = new_session_id();
        let session = Arc::new(Session::new(id.clone(), agent_id, protocol_version, now));
        let mut ended = Vec::new();
        {
            let mut sessions = lock(&self.sessions);
            let mut own: Vec<(Instant, String)> = Vec::new();
            sessions.retain(|id, other| {
                if other.is_expired(now) {
                    ended.push(Arc::clone(other));
                    return false;
                }
                if other.agent_id == session.agent_id {
                    own.push((other.last_used(), id.clone()));
                }
                true
            });
            if own.len() >= MAX_SESSIONS_PER_AGENT {
                own.sort_unstable();
                for (_, id) in &own[..=own.len() - MAX_SESSIONS_PER_AGENT] {
                    ended.extend(sessions.remove(id));
                }
            }
            if sessions.len() >= MAX_SESSIONS {
                drop(sessions);
                ended.iter().for_each(|session| session.end());
                return Err(McpError::TooManySessions);
            }
            sessions.insert(id, Arc::clone(&session));
        }
        ended.iter().for_each(|session| session.end());
        Ok(session)
    }

    /// `agent_id`'s session `id`, used now; [`McpError::UnknownSession`] for one that is not (another agent's
    /// too: a session id is no more than its agent's token lets it be).
    pub(crate) fn get(&self, id: &str, agent_id: &AgentId, now: Instant) -> Result<Arc<Session>, McpError> {
        let session = lock(&self.sessions).get(id).cloned().ok_or(McpError::UnknownSession)?;
        if session.agent_id != *agent_id {
            return Err(McpError::UnknownSession);
        }
        if session.is_expired(now) {
            self.remove(&session);
            return Err(McpError::UnknownSession);
        }
        session.touch(now);
        Ok(session)
    }

    /// Ends `session` and forgets it.
    pub(crate) fn remove(&self, session: &Arc<Session>) {
        let removed = lock(&self.sessions).remove(&session.id);
        if let Some(removed) = removed {
            removed.end();
        }
    }

    /// Ends every expired session; how many.
    pub(crate) fn sweep(&self, now: Instant) -> usize {
        let mut ended = Vec::new();
        lock(&self.sessions).retain(|_, session| {
            let expired = session.is_expired(now);
            if expired {
                ended.push(Arc::clone(session));
            }
            !expired
        });
        ended.iter().for_each(|session| session.end());
        ended.len()
    }

    pub(crate) fn len(&self) -> usize {
        lock(&self.sessions).len()
    }

    /// Ends every session (shutdown).
    pub(crate) fn end_all(&self) {
        let ended: Vec<_> = lock(&self.sessions).drain().map(|(_, session)| session).collect();
        ended.iter().for_each(|session| session.end());
    }
}

/// 128 bits from the operating system's generator, as hex (visible ASCII, as the transport requires). The id is
/// not what authenticates (the agent's token is, on every request), but it must not be guessable either.
fn new_session_id() -> String {
    use ring::rand::SecureRandom;
    static RANDOM: std::sync::OnceLock<ring::rand::SystemRandom> = std::sync::OnceLock::new();
    let mut bytes = [0u8; 16];
    if RANDOM.get_or_init(ring::rand::SystemRandom::new).fill(&mut bytes).is_err() {
        // Only without any entropy source: a counter and the clock still keep ids apart on this instance.
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let count = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |t| t.as_nanos());
        bytes[..8].copy_from_slice(&count.to_be_bytes());
        bytes[8..].copy_from_slice(&(nanos as u64).to_be_bytes());
    }
    gateway_core::encoding::hex::encode(&bytes)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// At [`MAX_SESSIONS`] in use, a new agent's session is refused (503 at the HTTP layer), while an agent at its
    /// own cap still gets one (its least recently used ends first), and an idle session's expiry makes room.
    #[tokio::test(start_paused = true)]
    async fn the_instance_holds_at_most_max_sessions() {
        let table = SessionTable::default();
        let agents = MAX_SESSIONS / MAX_SESSIONS_PER_AGENT;
        let now = Instant::now();
        for n in 0..agents {
            for _ in 0..MAX_SESSIONS_PER_AGENT {
                table.create(AgentId::new(format!("agent-{n}")).unwrap(), "2025-06-18", now).unwrap();
            }
        }
        // 10,000 is a multiple of 16: the table is exactly full.
        assert_eq!(table.len(), MAX_SESSIONS);
        let newcomer = AgentId::new("agent-new").unwrap();
        assert_eq!(table.create(newcomer.clone(), "2025-06-18", now).err(), Some(McpError::TooManySessions));
        assert_eq!(table.len(), MAX_SESSIONS, "a refusal ends nothing");
        table.create(AgentId::new("agent-0").unwrap(), "2025-06-18", now).unwrap();
        assert_eq!(table.len(), MAX_SESSIONS, "an agent at its own cap replaced its oldest");
        let later = now + SESSION_IDLE_EXPIRY + Duration::from_secs(1);
        table.create(newcomer, "2025-06-18", later).unwrap();
        assert_eq!(table.len(), 1, "the idle ones expired as the new one was made");
    }
}
