//! `GET /` and `GET /console/{asset}`: how the document shows the operator console's files.

use crate::{Operation, Reason};

pub fn page_doc() -> Operation {
    file_doc("console", "The operator console's page", &["text/html"])
}

pub fn asset_doc() -> Operation {
    file_doc("consoleAsset", "A file of the console", &["text/javascript", "text/css", "image/svg+xml"])
        .parameter(
            "path",
            "asset",
            true,
            "A file the console embeds (`app.js`, `app.css`, …); any other name is 404 `not_found`.",
            serde_json::json!({"type": "string"}),
        )
        .error(404, Reason::NotFound)
}

/// A file of the console: no token (the page asks for it and sends it with every call it makes), and 304 when
/// `If-None-Match` names the file's entity tag.
fn file_doc(operation_id: &str, summary: &str, media_types: &[&str]) -> Operation {
    let content: serde_json::Map<String, serde_json::Value> = media_types
        .iter()
        .map(|media_type| ((*media_type).to_owned(), serde_json::json!({"schema": {"type": "string"}})))
        .collect();
    Operation::new(operation_id, "probes", summary)
        .parameter(
            "header",
            "If-None-Match",
            false,
            "Entity tags the client holds.",
            serde_json::json!({"type": "string"}),
        )
        .raw_answer(200, serde_json::json!({"description": "The file.", "content": content}))
        .raw_answer(304, serde_json::json!({"description": "The client's copy is current (its entity tag matches)."}))
}
