//! The agent credential endpoints (docs/api.md, "Agent credentials"): their bodies, their page sizes, and how the
//! document shows them (the server's route table names the `…_doc` functions). The answers' fields are in alphabetical order,
//! the order they had when built as JSON maps: the same bytes.

use gateway_core::ports::credential::MAX_TOKEN_LIFETIME_S;
use gateway_core::{AgentId, CredentialId, CredentialRecord, encoding::rfc3339};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;
use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};

use crate::fields::{AgentIdSchema, credential_id};
use crate::{Operation, Reason, literal};

/// The page size of an agent's credentials when `limit` is absent.
pub const DEFAULT_PAGE: usize = 100;
/// The largest `limit` of an agent's credentials.
pub const MAX_PAGE: usize = 1000;

// `POST /gateway/agents/{agent_id}/credentials`: empty, `{}`, or the token's lifetime.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Only its schema is used: the handler reads the body field by field.
pub struct IssueCredential {
    #[schema(schema_with = expires_in_s, required = false)]
    expires_in_s: Option<u64>,
}

fn expires_in_s() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Integer, Type::Null]))
        .minimum(Some(1))
        .maximum(Some(MAX_TOKEN_LIFETIME_S))
        .description(Some(
            "Seconds from issue after which the token expires (at most ten years); absent or null: never.",
        ))
}

// A token, issued: shown this once.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IssuedCredential<'a> {
    #[schema(value_type = String)]
    pub agent_id: &'a AgentId,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(value_type = String, schema_with = credential_id)]
    pub credential_id: &'a CredentialId,
    #[schema(format = DateTime, required = true)]
    pub expires_at: Option<String>,
    #[schema(pattern = "^agt_[0-9a-f]{24}_[0-9a-f]{64}$")]
    pub token: &'a str,
}

// A credential as listed: never its token.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Credential)]
#[serde(deny_unknown_fields)]
pub struct CredentialBody<'a> {
    #[schema(value_type = String)]
    pub agent_id: &'a AgentId,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(value_type = String, schema_with = credential_id)]
    pub credential_id: &'a CredentialId,
    #[schema(format = DateTime, required = true)]
    pub expires_at: Option<String>,
    /// The start of the minute of its last use as recorded (each instance writes its uses every
    /// `--last-use-interval-s`); null: not used since it was recorded.
    #[schema(format = DateTime, required = true)]
    pub last_used_at: Option<String>,
    #[schema(format = DateTime, required = true)]
    pub revoked_at: Option<String>,
}

impl<'a> CredentialBody<'a> {
    pub fn of(row: &'a CredentialRecord) -> Self {
        Self {
            agent_id: &row.agent_id,
            created_at: rfc3339::format(row.created_at),
            credential_id: &row.credential_id,
            expires_at: row.expires_at.map(rfc3339::format),
            last_used_at: row.last_used_at.map(rfc3339::format),
            revoked_at: row.revoked_at.map(rfc3339::format),
        }
    }
}

literal!(
    /// `"revoked"`.
    Revoked = "revoked"
);

// A credential, revoked (now or before: its first `revoked_at`).
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RevokedCredential<'a> {
    #[schema(value_type = String)]
    pub agent_id: &'a AgentId,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(value_type = String, schema_with = credential_id)]
    pub credential_id: &'a CredentialId,
    #[schema(format = DateTime, required = true)]
    pub expires_at: Option<String>,
    #[schema(value_type = String, format = DateTime)]
    pub revoked_at: Option<String>,
    #[schema(inline)]
    pub status: Revoked,
}

impl<'a> RevokedCredential<'a> {
    pub fn of(row: &'a CredentialRecord) -> Self {
        let listed = CredentialBody::of(row);
        Self {
            agent_id: listed.agent_id,
            created_at: listed.created_at,
            credential_id: listed.credential_id,
            expires_at: listed.expires_at,
            revoked_at: listed.revoked_at,
            status: Revoked,
        }
    }
}

// A page of an agent's credentials, oldest first.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CredentialPage<'a> {
    pub credentials: Vec<CredentialBody<'a>>,
    #[schema(value_type = Option<String>, required = true)]
    pub next_after: Option<CredentialId>,
}

/// The path's agent.
fn agent_id(operation: Operation) -> Operation {
    operation.parameter_of::<AgentIdSchema>(
        "path",
        "agent_id",
        true,
        "The agent's id, percent-encoded as one path segment (`ns%3Aagent%2F7`).",
    )
}

fn credential_id_value() -> serde_json::Value {
    serde_json::to_value(credential_id().build()).unwrap_or_default()
}

pub fn issue_doc() -> Operation {
    agent_id(Operation::new("issueCredential", "operator", "Issue an agent token"))
        .describe(
            "The token is shown this once (`Cache-Control: no-store`); the gateway keeps only its hash. With \
             `expires_in_s` it stops authenticating that many seconds after issue (401 `token_expired`).",
        )
        .json_body_inline::<IssueCredential>(false)
        .example(json!({"expires_in_s": 86_400}))
        .answer_with_headers::<IssuedCredential<'static>>(
            201,
            "Issued.",
            json!({"Cache-Control": {"schema": {"type": "string", "const": "no-store"}}}),
        )
        .link(
            201,
            "revokeCredential",
            json!({"agent_id": "$response.body#/agent_id", "credential_id": "$response.body#/credential_id"}),
        )
        .error(422, Reason::InvalidField)
        .error(503, Reason::StoreUnavailable)
}

pub fn list_doc() -> Operation {
    agent_id(Operation::new("listCredentials", "operator", "An agent's credentials"))
        .describe("Oldest first, revoked ones included, never a token; pass `next_after` as `after` for the next page.")
        .limit(DEFAULT_PAGE, MAX_PAGE)
        .query("after", "A credential id: the page starts after it.", credential_id_value())
        .answer::<CredentialPage<'static>>(200, "A page of credentials.")
        .error(422, Reason::InvalidField)
        .error(503, Reason::StoreUnavailable)
}

pub fn list_all_doc() -> Operation {
    Operation::new("listAllCredentials", "operator", "Every agent's credentials")
        .describe(
            "Every agent's credentials in one list, oldest first (by credential id), revoked and expired ones \
             included, never a token, with each one's last use (to the minute); pass `next_after` as `after` for \
             the next page.",
        )
        .limit(DEFAULT_PAGE, MAX_PAGE)
        .query("after", "A credential id: the page starts after it.", credential_id_value())
        .answer::<CredentialPage<'static>>(200, "A page of credentials.")
        .error(422, Reason::InvalidField)
        .error(503, Reason::StoreUnavailable)
}

pub fn revoke_doc() -> Operation {
    agent_id(Operation::new("revokeCredential", "operator", "Revoke an agent token"))
        .describe("Revoked at once on this instance, within 5 s on the others; revoking again answers the same.")
        .parameter("path", "credential_id", true, "The credential's id.", credential_id_value())
        .answer::<RevokedCredential<'static>>(200, "Revoked.")
        .error(404, Reason::UnknownCredential)
        .error(422, Reason::InvalidField)
        .error(503, Reason::StoreUnavailable)
}
