//! The webhook endpoints: inbound `POST /gateway/webhooks/{webhook_id}`; the operator's `/gateway/webhook-configs`
//! and `/gateway/deliveries` (docs/webhooks.md): their bodies, and how the document shows them.

mod bodies;
mod docs;

pub use self::bodies::*;
pub use self::docs::*;
