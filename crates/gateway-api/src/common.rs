//! The bodies many endpoints share: the plain success, a delete's answer, and the error body of every refusal.

use serde::Serialize;
use utoipa::ToSchema;

use crate::fields::int64_schema;
use crate::literal;

/// The body of every plain success: `{"status":"ok"}` ([`StatusOk`]), serialized once.
pub const STATUS_OK: &[u8] = br#"{"status":"ok"}"#;

literal!(
    /// `"ok"`.
    OkStatus = "ok"
);

// `{"status":"ok"}`: what [`STATUS_OK`] holds, as a type for its schema.
#[derive(Debug, Default, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusOk {
    #[schema(inline)]
    pub status: OkStatus,
}

literal!(
    /// `"deleted"`.
    DeletedStatus = "deleted"
);

// `{"status":"deleted","id":…}`: what a delete answers.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Deleted)]
#[serde(deny_unknown_fields)]
pub struct Deleted {
    #[schema(inline)]
    pub status: DeletedStatus,
    #[schema(schema_with = int64_schema)]
    pub id: i64,
}

impl Deleted {
    pub fn new(id: i64) -> Self {
        Self { status: DeletedStatus, id }
    }
}

// An error body: `{"status":"error","reason":…}`, and `detail` when there is one. (Its fields are in the order the
// body had when it was built as a JSON map, alphabetical: the same bytes.)
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Error)]
#[serde(deny_unknown_fields)]
pub struct ErrorBody<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub detail: Option<&'a str>,
    // A `Reason`'s name (a doc comment here would be the schema's description).
    #[schema(value_type = crate::Reason, inline)]
    pub reason: &'a str,
    #[schema(inline)]
    pub status: ErrorStatus,
}

literal!(
    /// `"error"`: the `status` of every error body.
    ErrorStatus = "error"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plain_success_is_its_type_serialized() {
        assert_eq!(serde_json::to_vec(&StatusOk::default()).unwrap(), STATUS_OK);
    }
}
