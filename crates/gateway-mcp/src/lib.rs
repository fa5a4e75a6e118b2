#![doc = include_str!("../README.md")]

mod error;
mod jsonrpc;
mod resource;
mod server;
mod session;

use std::time::Duration;

pub use error::McpError;
pub use jsonrpc::{INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR, RESOURCE_NOT_FOUND};
pub use resource::{REMINDERS_URI_TEMPLATE, ReminderResource, reminders_uri};
pub use server::{
    McpHost, McpServer, PostAnswer, PostStatus, RequestHeaders, ResourceRefusal, SWEEP_INTERVAL, SubscriptionGuard,
    ToolDescriptor, ToolOutcome,
};
pub use session::{ResourceNotifier, SessionStream};

/// The protocol revisions this server speaks, oldest first (all through the `initialize` handshake). A client
/// offering one of them gets it; any other offer gets [`LATEST_PROTOCOL_VERSION`], which the client may refuse.
pub const PROTOCOL_VERSIONS: [&str; 2] = ["2025-06-18", "2025-11-25"];
/// The newest of [`PROTOCOL_VERSIONS`].
pub const LATEST_PROTOCOL_VERSION: &str = "2025-11-25";
/// The header that carries the session id, issued in the answer to `initialize`.
pub const SESSION_ID_HEADER: &str = "mcp-session-id";
/// The header that carries the negotiated revision on every request after `initialize`.
pub const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";

/// Sessions one agent may hold on one instance; a new one past it ends the agent's least recently used (a client
/// that restarts without `DELETE` must not lock its agent out).
pub const MAX_SESSIONS_PER_AGENT: usize = 16;
/// Sessions one instance holds in all; a new one past it (once idle ones are swept) is refused (503).
pub const MAX_SESSIONS: usize = 10_000;
/// A session neither used nor holding its server stream for this long ends (the client re-initializes on the 404).
pub const SESSION_IDLE_EXPIRY: Duration = Duration::from_secs(30 * 60);
/// Messages of a session's server stream kept for a client that resumes it with `Last-Event-ID`.
pub const STREAM_REPLAY_MESSAGES: usize = 64;
/// Resources a session may subscribe to (each holds a subscription to the bus).
pub const MAX_SUBSCRIPTIONS_PER_SESSION: usize = 8;
/// How often the server stream sends a comment when it has nothing else to send, so that proxies and clients
/// keep it open.
pub const STREAM_KEEP_ALIVE: Duration = Duration::from_secs(15);
