//! Checks of what operators and senders hand the router: webhook configs to create and deliveries to enqueue.

use gateway_core::{WebhookConfigChange, WebhookSecret};

use crate::error::WebhookError;
use crate::standard::secret_problem;

/// Longest accepted `source_identifier`, `event_type`, `agent_intent`, `target_session` and `session_id`.
pub const MAX_TEXT_FIELD_BYTES: usize = 256;
/// Longest accepted `target_url`.
pub const MAX_TARGET_URL_BYTES: usize = 2048;
/// Longest accepted secret.
pub const MAX_SECRET_BYTES: usize = 1024;
/// Page size of the inspector when `limit` is not given.
pub const DEFAULT_PAGE_SIZE: usize = 100;
/// Largest page the inspector returns.
pub const MAX_PAGE_SIZE: usize = 500;
/// Largest accepted `rate_limit_per_second` of a config: the ceiling `--webhook-max-per-second` has, above which an
/// endpoint's own rate could never be the one that binds.
pub const MAX_RATE_LIMIT_PER_SECOND: u32 = 100_000;

/// A webhook config as an operator submits it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookConfigDraft {
    pub source_identifier: String,
    pub event_type: String,
    pub agent_intent: String,
    pub target_session: String,
    pub target_url: String,
    pub secret: WebhookSecret,
    /// Verifies inbound signatures instead of `secret` (which then only signs outbound), when given.
    pub inbound_secret: Option<WebhookSecret>,
    /// Only Standard Webhooks signatures with a fresh timestamp are accepted inbound.
    pub inbound_require_timestamp: bool,
    /// The endpoint's own rate, as given (checked by [`check_rate_limit`]); `None`: only the global cap.
    pub rate_limit_per_second: Option<i64>,
}

fn check_text(field: &'static str, value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("must not be empty".into());
    }
    if value.len() > MAX_TEXT_FIELD_BYTES {
        return Err(format!("must be at most {MAX_TEXT_FIELD_BYTES} bytes"));
    }
    if value.chars().any(char::is_control) {
        return Err(format!("{field} must not contain control characters"));
    }
    Ok(())
}

/// An absolute `http://` or `https://` URL with a host and without credentials (they would end up in logs
/// and in the inspector).
pub fn check_target_url(url: &str) -> Result<(), String> {
    const EXPECTED: &str = "must be an absolute http(s) URL";
    if url.len() > MAX_TARGET_URL_BYTES {
        return Err(format!("must be at most {MAX_TARGET_URL_BYTES} bytes"));
    }
    let uri: http::Uri = url.parse().map_err(|_| EXPECTED.to_owned())?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(EXPECTED.into());
    }
    let authority = uri.authority().ok_or_else(|| EXPECTED.to_owned())?;
    if authority.as_str().contains('@') {
        return Err("must not contain credentials".into());
    }
    if authority.host().is_empty() {
        return Err(EXPECTED.into());
    }
    Ok(())
}

impl WebhookConfigDraft {
    pub fn validate(&self) -> Result<(), WebhookError> {
        let invalid = |field, problem| WebhookError::InvalidConfig { field, problem };
        for (field, value) in [
            ("source_identifier", &self.source_identifier),
            ("event_type", &self.event_type),
            ("agent_intent", &self.agent_intent),
            ("target_session", &self.target_session),
        ] {
            check_text(field, value).map_err(|problem| invalid(field, problem))?;
        }
        check_target_url(&self.target_url).map_err(|problem| invalid("target_url", problem))?;
        check_secret(&self.secret).map_err(|problem| invalid("secret", problem))?;
        if let Some(inbound) = &self.inbound_secret {
            check_secret(inbound).map_err(|problem| invalid("inbound_secret", problem))?;
        }
        if let Some(rate) = self.rate_limit_per_second {
            check_rate_limit(rate)?;
        }
        check_secrets_differ(&self.secret, self.inbound_secret.as_ref())
    }
}

/// A config's `rate_limit_per_second`: a whole number of attempt starts per second, 1 to
/// [`MAX_RATE_LIMIT_PER_SECOND`].
pub fn check_rate_limit(rate: i64) -> Result<u32, WebhookError> {
    u32::try_from(rate).ok().filter(|rate| (1..=MAX_RATE_LIMIT_PER_SECOND).contains(rate)).ok_or_else(|| {
        WebhookError::InvalidConfig {
            field: "rate_limit_per_second",
            problem: format!(
                "must be an integer from 1 to {MAX_RATE_LIMIT_PER_SECOND} (attempt starts per second), or null for none"
            ),
        }
    })
}

/// An inbound secret equal to the outbound one would verify what the gateway itself signed and sent out: the
/// reflection it exists to stop.
pub fn check_secrets_differ(secret: &WebhookSecret, inbound: Option<&WebhookSecret>) -> Result<(), WebhookError> {
    if inbound == Some(secret) {
        return Err(WebhookError::InvalidConfig {
            field: "inbound_secret",
            problem: "must differ from secret (the outbound secret)".into(),
        });
    }
    Ok(())
}

fn check_secret(secret: &WebhookSecret) -> Result<(), String> {
    let secret = secret.expose();
    if secret.is_empty() {
        return Err("must not be empty".into());
    }
    if secret.len() > MAX_SECRET_BYTES {
        return Err(format!("must be at most {MAX_SECRET_BYTES} bytes"));
    }
    // PostgreSQL cannot store text holding NUL: refused here on every backend alike, not a 500 there.
    if secret.contains('\0') {
        return Err("must not contain NUL (U+0000)".into());
    }
    secret_problem(secret).map_or(Ok(()), |problem| Err(problem.into()))
}

/// Checks a `PATCH` of a config: at least one field, each as a create checks it.
pub fn check_config_change(change: &WebhookConfigChange) -> Result<(), WebhookError> {
    let invalid = |field, problem| WebhookError::InvalidConfig { field, problem };
    if *change == WebhookConfigChange::default() {
        return Err(invalid(
            "body",
            "name at least one of target_url, agent_intent, target_session, secret, inbound_secret, \
             inbound_require_timestamp, revoke_previous, rate_limit_per_second, enabled"
                .into(),
        ));
    }
    for (field, value) in [("agent_intent", &change.agent_intent), ("target_session", &change.target_session)] {
        if let Some(value) = value {
            check_text(field, value).map_err(|problem| invalid(field, problem))?;
        }
    }
    if let Some(url) = &change.target_url {
        check_target_url(url).map_err(|problem| invalid("target_url", problem))?;
    }
    if let Some(secret) = &change.secret {
        check_secret(secret).map_err(|problem| invalid("secret", problem))?;
    }
    if let Some(inbound) = &change.inbound_secret {
        check_secret(inbound).map_err(|problem| invalid("inbound_secret", problem))?;
    }
    if let (Some(secret), Some(inbound)) = (&change.secret, &change.inbound_secret) {
        check_secrets_differ(secret, Some(inbound))?;
    }
    if let Some(Some(rate)) = change.rate_limit_per_second {
        check_rate_limit(i64::from(rate))?;
    }
    Ok(())
}

/// Checks an enqueued delivery's `session_id` and that its payload is JSON.
pub fn check_delivery(session_id: &str, payload: &str) -> Result<(), WebhookError> {
    check_text("session_id", session_id)
        .map_err(|problem| WebhookError::InvalidDelivery { field: "session_id", problem })?;
    serde_json::from_str::<serde::de::IgnoredAny>(payload)
        .map_err(|error| WebhookError::InvalidDelivery { field: "payload", problem: format!("not JSON: {error}") })?;
    Ok(())
}

/// An event to publish: an `event_type` (a config's own rule, but never `*`: that is the wildcard configs
/// subscribe with, not a type), an optional narrowing `source_identifier`, and a JSON payload.
pub fn check_event(event_type: &str, source_identifier: Option<&str>, payload: &str) -> Result<(), WebhookError> {
    check_text("event_type", event_type)
        .map_err(|problem| WebhookError::InvalidDelivery { field: "event_type", problem })?;
    if event_type == gateway_core::WILDCARD_EVENT_TYPE {
        return Err(WebhookError::InvalidDelivery {
            field: "event_type",
            problem: "must name a type; \"*\" is what a config subscribes to every type with".into(),
        });
    }
    if let Some(source) = source_identifier {
        check_text("source_identifier", source)
            .map_err(|problem| WebhookError::InvalidDelivery { field: "source_identifier", problem })?;
    }
    serde_json::from_str::<serde::de::IgnoredAny>(payload)
        .map_err(|error| WebhookError::InvalidDelivery { field: "payload", problem: format!("not JSON: {error}") })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draft() -> WebhookConfigDraft {
        WebhookConfigDraft {
            source_identifier: "github".into(),
            event_type: "pull_request.opened".into(),
            agent_intent: "code_review".into(),
            target_session: "reviewer-cluster".into(),
            target_url: "https://hooks.example.com:8443/in?team=a".into(),
            secret: WebhookSecret::new("It's a Secret to Everybody"),
            inbound_secret: None,
            inbound_require_timestamp: false,
            rate_limit_per_second: None,
        }
    }

    #[test]
    fn a_rate_limit_is_a_whole_number_from_one_to_the_maximum() {
        let with_rate = |rate| WebhookConfigDraft { rate_limit_per_second: Some(rate), ..draft() };
        for rate in [1, 2, i64::from(MAX_RATE_LIMIT_PER_SECOND)] {
            assert_eq!(with_rate(rate).validate(), Ok(()), "{rate}");
            assert_eq!(check_rate_limit(rate).map(i64::from), Ok(rate));
        }
        for rate in [0, -1, i64::from(MAX_RATE_LIMIT_PER_SECOND) + 1, i64::from(u32::MAX) + 2, i64::MIN] {
            let Err(WebhookError::InvalidConfig { field, .. }) = with_rate(rate).validate() else {
                panic!("{rate} accepted")
            };
            assert_eq!(field, "rate_limit_per_second");
        }
        let change = |rate| WebhookConfigChange { rate_limit_per_second: Some(rate), ..WebhookConfigChange::default() };
        assert_eq!(check_config_change(&change(None)), Ok(()), "null removes it");
        assert_eq!(check_config_change(&change(Some(3))), Ok(()));
        assert!(check_config_change(&change(Some(0))).is_err());
        assert!(check_config_change(&change(Some(MAX_RATE_LIMIT_PER_SECOND + 1))).is_err());
    }

    #[test]
    fn a_complete_draft_passes() {
        assert_eq!(draft().validate(), Ok(()));
        assert_eq!(WebhookConfigDraft { target_url: "http://127.0.0.1:9/x".into(), ..draft() }.validate(), Ok(()));
    }

    #[test]
    fn target_urls_must_be_absolute_http_without_credentials() {
        for url in [
            "",
            "/relative/path",
            "example.com/hook",
            "ftp://example.com/hook",
            "file:///etc/passwd",
            "http://",
            "https://user:pass@example.com/",
            "not a url",
        ] {
            let result = WebhookConfigDraft { target_url: url.into(), ..draft() }.validate();
            assert!(
                matches!(result, Err(WebhookError::InvalidConfig { field: "target_url", .. })),
                "{url}: {result:?}"
            );
        }
        let long = format!("https://example.com/{}", "a".repeat(MAX_TARGET_URL_BYTES));
        assert!(WebhookConfigDraft { target_url: long, ..draft() }.validate().is_err());
    }

    #[test]
    fn text_fields_and_the_secret_are_bounded() {
        let result = WebhookConfigDraft { event_type: String::new(), ..draft() }.validate();
        assert_eq!(
            result,
            Err(WebhookError::InvalidConfig { field: "event_type", problem: "must not be empty".into() })
        );
        let result = WebhookConfigDraft { agent_intent: "x".repeat(MAX_TEXT_FIELD_BYTES + 1), ..draft() }.validate();
        assert!(matches!(result, Err(WebhookError::InvalidConfig { field: "agent_intent", .. })));
        let result = WebhookConfigDraft { target_session: "a\nb".into(), ..draft() }.validate();
        assert!(matches!(result, Err(WebhookError::InvalidConfig { field: "target_session", .. })));
        let result = WebhookConfigDraft { secret: WebhookSecret::new(""), ..draft() }.validate();
        assert!(matches!(result, Err(WebhookError::InvalidConfig { field: "secret", .. })));
        let result = WebhookConfigDraft { secret: WebhookSecret::new("k".repeat(MAX_SECRET_BYTES + 1)), ..draft() };
        assert!(matches!(result.validate(), Err(WebhookError::InvalidConfig { field: "secret", .. })));
        let result = WebhookConfigDraft { secret: WebhookSecret::new("a\0b"), ..draft() }.validate();
        assert!(matches!(result, Err(WebhookError::InvalidConfig { field: "secret", .. })));
        assert_eq!(WebhookConfigDraft { secret: WebhookSecret::new("a\tb"), ..draft() }.validate(), Ok(()));
    }

    #[test]
    fn an_inbound_secret_is_checked_as_a_secret_and_must_differ_from_the_outbound_one() {
        let with = |inbound: &str| WebhookConfigDraft { inbound_secret: Some(WebhookSecret::new(inbound)), ..draft() };
        assert_eq!(with("another secret").validate(), Ok(()));
        for bad in ["", "whsec_%%", "a\0b", "It's a Secret to Everybody"] {
            let result = with(bad).validate();
            assert!(matches!(result, Err(WebhookError::InvalidConfig { field: "inbound_secret", .. })), "{bad:?}");
        }
        let change = WebhookConfigChange {
            secret: Some(WebhookSecret::new("same")),
            inbound_secret: Some(WebhookSecret::new("same")),
            ..WebhookConfigChange::default()
        };
        assert!(matches!(
            check_config_change(&change),
            Err(WebhookError::InvalidConfig { field: "inbound_secret", .. })
        ));
        let revoke = WebhookConfigChange { revoke_previous: true, ..WebhookConfigChange::default() };
        assert_eq!(check_config_change(&revoke), Ok(()), "revoke_previous alone is a change");
        let require = WebhookConfigChange { inbound_require_timestamp: Some(false), ..WebhookConfigChange::default() };
        assert_eq!(check_config_change(&require), Ok(()));
    }

    #[test]
    fn a_whsec_secret_must_be_base64() {
        let draft = |secret: &str| WebhookConfigDraft { secret: WebhookSecret::new(secret), ..draft() };
        assert_eq!(draft("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").validate(), Ok(()));
        for secret in ["whsec_", "whsec_not base64!"] {
            assert!(matches!(draft(secret).validate(), Err(WebhookError::InvalidConfig { field: "secret", .. })));
        }
    }

    #[test]
    fn a_change_names_something_and_each_field_is_checked_as_on_create() {
        let change = |edit: fn(&mut WebhookConfigChange)| {
            let mut change = WebhookConfigChange::default();
            edit(&mut change);
            check_config_change(&change)
        };
        assert!(matches!(change(|_| {}), Err(WebhookError::InvalidConfig { field: "body", .. })));
        assert_eq!(change(|c| c.agent_intent = Some("triage".into())), Ok(()));
        assert_eq!(change(|c| c.secret = Some(WebhookSecret::new("new"))), Ok(()));
        assert_eq!(change(|c| c.target_url = Some("https://example.com/x".into())), Ok(()));
        for (expected, edit) in [
            ("target_url", (|c| c.target_url = Some("ftp://example.com".into())) as fn(&mut WebhookConfigChange)),
            ("agent_intent", |c| c.agent_intent = Some(String::new())),
            ("target_session", |c| c.target_session = Some("a\nb".into())),
            ("secret", |c| c.secret = Some(WebhookSecret::new(""))),
            ("secret", |c| c.secret = Some(WebhookSecret::new("whsec_%%"))),
            ("secret", |c| c.secret = Some(WebhookSecret::new("a\0b"))),
        ] {
            assert!(
                matches!(change(edit), Err(WebhookError::InvalidConfig { field, .. }) if field == expected),
                "{expected}"
            );
        }
    }

    #[test]
    fn deliveries_need_a_session_and_a_json_payload() {
        assert_eq!(check_delivery("s-1", r#"{"a":1}"#), Ok(()));
        assert_eq!(check_delivery("s-1", "[1,2]"), Ok(()));
        assert!(matches!(check_delivery("", "{}"), Err(WebhookError::InvalidDelivery { field: "session_id", .. })));
        assert!(matches!(check_delivery("s", "{"), Err(WebhookError::InvalidDelivery { field: "payload", .. })));
    }
}
