//! Schemas of fields that many bodies share, for the body types' `#[schema(schema_with = …)]`: what a type alone
//! cannot say (an id's bytes, a name's characters, an `i64`'s range).

use serde_json::{Value, json};
use utoipa::openapi::schema::{ObjectBuilder, Schema, SchemaFormat, Type};
use utoipa::openapi::{KnownFormat, RefOr};

/// What ids and names may not hold: control characters (Unicode's Cc: U+0000-U+001F, U+007F-U+009F).
pub const NO_CONTROL_CHARACTERS: &str = "^[^\\u0000-\\u001F\\u007F-\\u009F]*$";

/// An id or a name: 1 to 256 bytes (the schema can only count characters) without control characters.
pub fn name_256() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(256))
        .pattern(Some(NO_CONTROL_CHARACTERS))
}

/// Text of 1 to 256 characters.
pub fn text_256() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::String).min_length(Some(1)).max_length(Some(256))
}

/// An integer the gateway reads as an `i64` (ids, cursors), as a JSON value for parameters.
pub fn int64() -> Value {
    json!({"type": "integer", "format": "int64", "minimum": i64::MIN, "maximum": i64::MAX})
}

/// An integer the gateway reads as an `i64`, for body fields.
pub fn int64_schema() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
        .minimum(Some(i64::MIN))
        .maximum(Some(i64::MAX))
}

/// A webhook secret: 1 to 1024 bytes without NUL; `whsec_` must be followed by base64 (docs/webhooks.md).
pub fn secret() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(1024))
        .pattern(Some("^[^\\u0000]*$"))
}

/// An absolute http(s) URL.
pub fn target_url() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .format(Some(SchemaFormat::Custom("uri".to_owned())))
        .max_length(Some(2048))
        .description(Some("An absolute http(s) URL without credentials."))
}

/// A credential's id: 24 hex digits.
pub fn credential_id() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::String).pattern(Some("^[0-9a-f]{24}$"))
}

/// The schema of an agent id, wherever one is read: the component `AgentId`.
#[derive(Debug)]
pub struct AgentIdSchema;

impl utoipa::PartialSchema for AgentIdSchema {
    fn schema() -> RefOr<Schema> {
        name_256().description(Some("At most 256 bytes, no control characters.")).into()
    }
}

impl utoipa::ToSchema for AgentIdSchema {
    fn name() -> std::borrow::Cow<'static, str> {
        "AgentId".into()
    }
}

/// Declares a string type that always holds one value (a body's `"status":"ok"`, a heartbeat's
/// `"type":"heartbeat"`): a unit struct that serializes as that value, whose schema is that one value. Fields of it
/// are `#[schema(inline)]`.
#[macro_export]
macro_rules! literal {
    ($(#[doc = $doc:literal])* $name:ident = $value:literal) => {
        $(#[doc = $doc])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct $name;

        impl $crate::__private::serde::Serialize for $name {
            fn serialize<S: $crate::__private::serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str($value)
            }
        }

        impl $crate::__private::utoipa::PartialSchema for $name {
            fn schema() -> $crate::__private::utoipa::openapi::RefOr<$crate::__private::utoipa::openapi::schema::Schema> {
                $crate::__private::utoipa::openapi::schema::ObjectBuilder::new()
                    .schema_type($crate::__private::utoipa::openapi::schema::Type::String)
                    .enum_values(Some([$value]))
                    .into()
            }
        }

        impl $crate::__private::utoipa::ToSchema for $name {}
    };
}
