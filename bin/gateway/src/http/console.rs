//! The operator console: `GET /` (the page) and `GET /console/<asset>` (its scripts, styles and icon), all
//! embedded in the binary, so that the gateway needs no build step, no files beside it and no network to serve it.
//!
//! The page needs no token: it holds no data. Every call it makes goes to the public API with the operator token
//! the operator pastes into it (docs/operations.md, "The console").
//!
//! What the console shows comes from agents and webhook senders, so it is hostile text: the scripts only ever put
//! it into the page as text, and the Content-Security-Policy below refuses inline script and every origin but the
//! gateway's own, so that a mistake there cannot run someone else's script or send the token elsewhere.

use std::sync::LazyLock;

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, ETAG, HeaderValue, IF_NONE_MATCH};
use http::{HeaderMap, StatusCode};
use http_body_util::BodyExt;

use crate::http::error::ApiError;
use crate::http::request::Request;
use crate::http::response::Response;

/// One embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

/// Every file `/console/<name>` serves: an exact list, so that no path can reach anything else.
const ASSETS: &[Asset] = &[
    Asset { name: "app.css", content_type: "text/css; charset=utf-8", body: include_bytes!("../../console/app.css") },
    Asset { name: "app.js", content_type: JS, body: include_bytes!("../../console/app.js") },
    Asset { name: "api.js", content_type: JS, body: include_bytes!("../../console/api.js") },
    Asset { name: "dom.js", content_type: JS, body: include_bytes!("../../console/dom.js") },
    Asset { name: "format.js", content_type: JS, body: include_bytes!("../../console/format.js") },
    Asset { name: "sse.js", content_type: JS, body: include_bytes!("../../console/sse.js") },
    Asset { name: "overview.js", content_type: JS, body: include_bytes!("../../console/overview.js") },
    Asset { name: "agents.js", content_type: JS, body: include_bytes!("../../console/agents.js") },
    Asset { name: "cron.js", content_type: JS, body: include_bytes!("../../console/cron.js") },
    Asset { name: "credentials.js", content_type: JS, body: include_bytes!("../../console/credentials.js") },
    Asset { name: "deliveries.js", content_type: JS, body: include_bytes!("../../console/deliveries.js") },
    Asset { name: "tail.js", content_type: JS, body: include_bytes!("../../console/tail.js") },
    Asset { name: "endpoints.js", content_type: JS, body: include_bytes!("../../console/endpoints.js") },
    Asset { name: "charts.js", content_type: JS, body: include_bytes!("../../console/charts.js") },
    Asset { name: "favicon.svg", content_type: "image/svg+xml", body: include_bytes!("../../console/favicon.svg") },
];

const JS: &str = "text/javascript; charset=utf-8";

const PAGE: Asset = Asset {
    name: "index.html",
    content_type: "text/html; charset=utf-8",
    body: include_bytes!("../../console/index.html"),
};

/// Scripts and styles from the gateway only, no inline script or style attribute, no plugin, no frame, no form
/// posted anywhere, API calls and event streams to the gateway only.
pub(super) const CONTENT_SECURITY_POLICY_VALUE: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// Revalidated on every load (answered 304 while the binary is the same): the names carry no version, and an
/// upgraded gateway must not run yesterday's scripts against today's API.
const CACHE: &str = "no-cache";

/// The entity tag of every file: its SHA-256, computed once.
static ETAGS: LazyLock<Vec<HeaderValue>> =
    LazyLock::new(|| ASSETS.iter().chain(std::iter::once(&PAGE)).map(|asset| etag(asset.body)).collect());

fn etag(body: &[u8]) -> HeaderValue {
    let digest = ring::digest::digest(&ring::digest::SHA256, body);
    let hex = gateway_core::encoding::hex::encode(&digest.as_ref()[..16]);
    HeaderValue::from_str(&format!("\"{hex}\"")).unwrap_or_else(|_| HeaderValue::from_static("\"\""))
}

/// `GET /`.
pub(super) fn page(request: &Request) -> Response {
    serve(&PAGE, &ETAGS[ASSETS.len()], request.headers())
}

/// `GET /console/<name>`: 404 `not_found` for a name not on the list.
pub(super) fn asset(request: &Request) -> Result<Response, ApiError> {
    let name = request.uri().path().strip_prefix("/console/").unwrap_or_default();
    let index = ASSETS.iter().position(|asset| asset.name == name).ok_or_else(ApiError::not_found)?;
    Ok(serve(&ASSETS[index], &ETAGS[index], request.headers()))
}

fn serve(asset: &Asset, etag: &HeaderValue, request: &HeaderMap) -> Response {
    let unchanged = request
        .get(IF_NONE_MATCH)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|tags| tags.split(',').any(|tag| tag.trim() == etag.to_str().unwrap_or_default()));
    let (status, body) = if unchanged {
        (StatusCode::NOT_MODIFIED, Bytes::new())
    } else {
        (StatusCode::OK, Bytes::from_static(asset.body))
    };
    let mut response = http::Response::new(http_body_util::Full::new(body).map_err(|never| match never {}).boxed());
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static(CACHE));
    headers.insert(ETAG, etag.clone());
    headers.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY_VALUE));
    headers.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    // The page's address carries only the view, but what it links to (a delivery's target) need not learn it.
    headers.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    headers.insert("x-frame-options", HeaderValue::from_static("DENY"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_is_named_once_and_the_page_loads_only_listed_assets() {
        for (index, asset) in ASSETS.iter().enumerate() {
            assert!(!asset.body.is_empty(), "{}", asset.name);
            assert!(ASSETS[index + 1..].iter().all(|other| other.name != asset.name), "{} twice", asset.name);
        }
        let page = std::str::from_utf8(PAGE.body).unwrap();
        // Every `/console/…` reference in the page and every module import names a listed asset.
        let mut referenced = Vec::new();
        for text in std::iter::once(page).chain(ASSETS.iter().filter_map(|asset| std::str::from_utf8(asset.body).ok()))
        {
            for (start, _) in text.match_indices("/console/") {
                let name: String =
                    text[start + 9..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '.').collect();
                referenced.push(name);
            }
            for (start, _) in text.match_indices("from './") {
                let name: String = text[start + 8..].chars().take_while(|c| *c != '\'').collect();
                referenced.push(name);
            }
        }
        assert!(referenced.iter().any(|name| name == "app.js"));
        for name in referenced {
            assert!(ASSETS.iter().any(|asset| asset.name == name), "{name} is referenced but not served");
        }
    }

    #[test]
    fn the_page_has_no_inline_script_or_style() {
        let page = std::str::from_utf8(PAGE.body).unwrap();
        for (start, _) in page.match_indices("<script") {
            let tag: String = page[start..].chars().take_while(|c| *c != '>').collect();
            assert!(tag.contains("src=\"/console/"), "inline script: {tag}");
        }
        assert!(!page.contains("<style") && !page.contains(" style="), "inline style");
        assert!(!page.contains("http://") && !page.contains("https://"), "the page must work offline");
    }

    #[test]
    fn an_unchanged_asset_is_answered_304() {
        let asset = &ASSETS[0];
        let tag = &ETAGS[0];
        let mut headers = HeaderMap::new();
        assert_eq!(serve(asset, tag, &headers).status(), StatusCode::OK);
        headers.insert(IF_NONE_MATCH, tag.clone());
        let response = serve(asset, tag, &headers);
        assert_eq!(response.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(response.headers()[ETAG], tag);
        headers.insert(IF_NONE_MATCH, HeaderValue::from_static("\"other\""));
        assert_eq!(serve(asset, tag, &headers).status(), StatusCode::OK);
    }
}
