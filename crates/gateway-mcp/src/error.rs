//! Error policy: the refusals of a request before any of its JSON-RPC messages is answered (the binary maps each
//! to an HTTP status in its error module). A message that is answered, even with a JSON-RPC error, is a
//! [`crate::PostAnswer`], not one of these.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpError {
    /// A message other than `initialize` came without `Mcp-Session-Id`.
    #[error("Mcp-Session-Id is required: send initialize first")]
    SessionRequired,
    /// The session id names no session of this agent on this instance (never issued, ended, expired, or another
    /// instance's): the client starts a new one with `initialize`.
    #[error("no session has this Mcp-Session-Id (ended or expired): initialize again")]
    UnknownSession,
    /// `MCP-Protocol-Version` names a revision this server does not speak.
    #[error("MCP-Protocol-Version must be one of {}", crate::PROTOCOL_VERSIONS.join(", "))]
    UnsupportedProtocolVersion,
    /// The instance holds [`crate::MAX_SESSIONS`] sessions that are in use.
    #[error("this gateway holds as many MCP sessions as it may; retry later")]
    TooManySessions,
}
