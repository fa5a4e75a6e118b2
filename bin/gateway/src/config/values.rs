//! The flags' values: numbers within bounds, and the values that are secrets or may carry one (their parsers never
//! repeat them in an error, their Debug never shows them).

use std::fmt;
use std::time::Duration;

use gateway_store::DatabaseUrl;

use super::{AdminToken, MIN_ADMIN_TOKEN_CHARS};

pub(super) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

pub(super) fn positive_u64(value: &str) -> Result<u64, String> {
    match value.trim().parse::<u64>() {
        Ok(0) => Err("must be greater than 0".to_owned()),
        Ok(number) => Ok(number),
        Err(_) => Err("must be a positive integer".to_owned()),
    }
}

/// A positive integer of at most `max`.
pub(super) fn at_most(max: u64) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    move |value| match positive_u64(value)? {
        number if number > max => Err(format!("must be at most {max}")),
        number => Ok(number),
    }
}

/// An integer from `min` to `max`.
pub(super) fn between(min: u64, max: u64) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    let bounded = at_most(max);
    move |value| match bounded(value)? {
        number if number < min => Err(format!("must be at least {min}")),
        number => Ok(number),
    }
}

/// An integer from 0 to `max`.
pub(super) fn up_to_u32(max: u64) -> impl Fn(&str) -> Result<u32, String> + Clone + Send + Sync + 'static {
    let bounded = at_most(max);
    move |value| match value.trim() {
        "0" => Ok(0),
        _ => bounded(value).and_then(|number| u32::try_from(number).map_err(|_| "is too large".to_owned())),
    }
}

pub(super) fn at_most_usize(max: usize) -> impl Fn(&str) -> Result<usize, String> + Clone + Send + Sync + 'static {
    let bounded = at_most(u64::try_from(max).unwrap_or(u64::MAX));
    move |value| bounded(value).and_then(|number| usize::try_from(number).map_err(|_| "is too large".to_owned()))
}

/// An integer from `min` to `max`.
pub(super) fn between_usize(
    min: usize,
    max: usize,
) -> impl Fn(&str) -> Result<usize, String> + Clone + Send + Sync + 'static {
    let bounded = at_most_usize(max);
    move |value| match bounded(value)? {
        number if number < min => Err(format!("must be at least {min}")),
        number => Ok(number),
    }
}

/// A value parser whose errors never repeat the value: clap's own message would ("invalid value 'hunter2…' for
/// '--admin-token'"), and these values are secrets or may carry one (a database password).
#[derive(Clone)]
pub(super) struct SecretValue<T>(pub(super) fn(&str) -> Result<T, String>);

impl<T: Clone + Send + Sync + 'static> clap::builder::TypedValueParser for SecretValue<T> {
    type Value = T;

    fn parse_ref(
        &self,
        _command: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<T, clap::Error> {
        let flag = arg.map_or_else(|| "the value".to_owned(), |arg| format!("'{arg}'"));
        let refuse = |reason: &str| {
            clap::Error::raw(clap::error::ErrorKind::ValueValidation, format!("invalid value for {flag}: {reason}\n"))
        };
        let text = value.to_str().ok_or_else(|| refuse("must be valid UTF-8"))?;
        (self.0)(text).map_err(|reason| refuse(&reason))
    }
}

pub(super) fn parse_retry_schedule(value: &str) -> Result<gateway_webhooks::RetrySchedule, String> {
    if value.trim().is_empty() {
        return Err("must list at least one delay in seconds, e.g. 30,120,600,3600,21600".to_owned());
    }
    let seconds = value
        .split(',')
        .map(|delay| positive_u64(delay).map_err(|reason| format!("each delay {reason}")))
        .collect::<Result<Vec<_>, _>>()?;
    gateway_webhooks::RetrySchedule::from_seconds(&seconds).map_err(|error| error.to_string())
}

pub(super) fn parse_database_url(value: &str) -> Result<DatabaseUrl, String> {
    DatabaseUrl::parse(value).map_err(|error| error.to_string())
}

/// `--redis-url`. Debug never shows it: it may hold a password.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisUrl(String);

impl RedisUrl {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RedisUrl(<redacted>)")
    }
}

pub(super) fn parse_redis_url(value: &str) -> Result<RedisUrl, String> {
    let value = value.trim();
    if !(value.starts_with("redis://") || value.starts_with("rediss://")) || value.len() <= "redis://".len() {
        return Err("expected redis://HOST:PORT/DB (or rediss:// for TLS)".to_owned());
    }
    if value.contains('#') {
        return Err(
            "a #fragment (such as #insecure: no certificate check) is not taken; give Redis's certificate authority \
             with --redis-ca-file"
                .to_owned(),
        );
    }
    Ok(RedisUrl(value.to_owned()))
}

/// `--cluster-secret`. Debug never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterSecret(Vec<u8>);

impl ClusterSecret {
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClusterSecret(<redacted>)")
    }
}

/// `--cluster-secret-file`: the secret, and the previous one while a rotation is rolled out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSecretFile {
    pub secret: ClusterSecret,
    pub previous: Option<ClusterSecret>,
}

pub(super) fn parse_cluster_secret(value: &str) -> Result<ClusterSecret, String> {
    let secret = value.trim();
    if secret.len() < gateway_pubsub::bridge::MIN_SECRET_BYTES {
        return Err(format!("must be at least {} bytes", gateway_pubsub::bridge::MIN_SECRET_BYTES));
    }
    Ok(ClusterSecret(secret.as_bytes().to_vec()))
}

pub(super) fn parse_cluster_secret_file(path: &str) -> Result<ClusterSecretFile, String> {
    let text = std::fs::read_to_string(path).map_err(|error| format!("cannot read the file: {}", error.kind()))?;
    let mut lines = text.lines();
    let secret = parse_cluster_secret(lines.next().unwrap_or_default())
        .map_err(|reason| format!("its first line (the secret) {reason}"))?;
    let previous = match lines.next().map(str::trim) {
        None | Some("") => None,
        Some(line) => Some(
            parse_cluster_secret(line).map_err(|reason| format!("its second line (the previous secret) {reason}"))?,
        ),
    };
    Ok(ClusterSecretFile { secret, previous })
}

/// The contents of a PEM file given by a flag. Debug never shows them (one may be a private key).
#[derive(Clone, PartialEq, Eq)]
pub struct PemFile(pub(super) Vec<u8>);

impl fmt::Debug for PemFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PemFile(<redacted>)")
    }
}

pub(super) fn read_pem(path: &str, label: &str) -> Result<PemFile, String> {
    let pem = std::fs::read(path).map_err(|error| format!("cannot read the file: {}", error.kind()))?;
    let text = String::from_utf8_lossy(&pem);
    if !text.lines().any(|line| line.starts_with("-----BEGIN ") && line.contains(label)) {
        return Err(format!("expected a PEM file with a {label}"));
    }
    Ok(PemFile(pem))
}

pub(super) fn parse_pem_certificates(path: &str) -> Result<PemFile, String> {
    read_pem(path, "CERTIFICATE")
}

pub(super) fn parse_pem_private_key(path: &str) -> Result<PemFile, String> {
    read_pem(path, "PRIVATE KEY")
}

pub(super) fn parse_admin_token(value: &str) -> Result<AdminToken, String> {
    let token = value.trim();
    if token.chars().count() < MIN_ADMIN_TOKEN_CHARS {
        return Err(format!("must be at least {MIN_ADMIN_TOKEN_CHARS} characters"));
    }
    if token.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("must not contain whitespace or control characters".to_owned());
    }
    Ok(AdminToken::new(token.to_owned()))
}
