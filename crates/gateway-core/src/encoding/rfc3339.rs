//! The one way instants are written and read as text: RFC 3339, always shown in UTC.
//!
//! Parsing never panics on what a client sends: an instant whose UTC form falls outside the calendar `time`
//! can represent (`9999-12-31T23:59:59-01:00` is year 10000 in UTC) is refused like any malformed text, rather
//! than reaching a conversion that would overflow.

use time::format_description::well_known::Rfc3339;
use time::{OffsetDateTime, UtcOffset};

/// `instant` as the API writes every instant: RFC 3339 in UTC at millisecond precision, its fractional digits
/// without trailing zeros (`2026-02-22T12:00:05.25Z`, `2026-02-22T12:00:05.001Z`), none on a whole second
/// (`2026-02-22T12:00:05Z`: every cron instant). One precision whatever the field: instants are kept to the
/// microsecond and made to the nanosecond, and writing each as it came gave 9, 6 or 3 digits by field. Zeros are
/// dropped rather than padded so that every instant the scheduler makes (whole milliseconds) is written exactly as
/// its `fire_id` embeds it ([`format_exact`]). A client that sends one back (a `since` filter) gets the rows from
/// that millisecond on.
pub fn format(instant: OffsetDateTime) -> String {
    let utc = instant.checked_to_offset(UtcOffset::UTC).unwrap_or(instant);
    let millisecond = utc.replace_nanosecond(utc.nanosecond() / 1_000_000 * 1_000_000).unwrap_or(utc);
    rfc3339_text(millisecond)
}

/// `instant` in UTC with every fractional digit it has (trailing zeros dropped): the text a `fire_id` embeds, which
/// must never change for an instant once fired under it. For the whole-millisecond instants the scheduler makes,
/// the same text as [`format`].
pub fn format_exact(instant: OffsetDateTime) -> String {
    rfc3339_text(instant.checked_to_offset(UtcOffset::UTC).unwrap_or(instant))
}

fn rfc3339_text(utc: OffsetDateTime) -> String {
    // Formatting fails only for years beyond four digits, which `parse` never lets in and clocks never reach.
    utc.format(&Rfc3339).unwrap_or_else(|_| utc.unix_timestamp().to_string())
}

/// `#[serde(with = "gateway_core::encoding::rfc3339::serde")]`: an instant written by [`format`] and read by
/// [`parse`], for every instant a client or a receiver sees.
pub mod serde {
    use ::serde::de::Error as _;
    use ::serde::{Deserialize, Deserializer, Serializer};
    use time::OffsetDateTime;

    pub fn serialize<S: Serializer>(instant: &OffsetDateTime, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&super::format(*instant))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<OffsetDateTime, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        super::parse(&text).ok_or_else(|| D::Error::custom("not an RFC 3339 instant"))
    }

    /// The same for an `Option`: `null` when absent.
    pub mod option {
        use ::serde::{Deserialize, Deserializer, Serializer};
        use time::OffsetDateTime;

        pub fn serialize<S: Serializer>(instant: &Option<OffsetDateTime>, serializer: S) -> Result<S::Ok, S::Error> {
            match instant {
                Some(instant) => super::serialize(instant, serializer),
                None => serializer.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<OffsetDateTime>, D::Error> {
            #[derive(Deserialize)]
            struct Instant(#[serde(with = "super")] OffsetDateTime);
            Ok(Option::<Instant>::deserialize(deserializer)?.map(|Instant(instant)| instant))
        }
    }
}

/// An RFC 3339 instant with any offset, converted to UTC; `None` when the text is not one or its UTC form falls
/// outside the years 0000 to 9999 that RFC 3339 can write.
pub fn parse(text: &str) -> Option<OffsetDateTime> {
    let utc = OffsetDateTime::parse(text, &Rfc3339).ok()?.checked_to_offset(UtcOffset::UTC)?;
    (0..=9999).contains(&utc.year()).then_some(utc)
}

/// An RFC 3339 instant whose offset is UTC (`Z` or `+00:00`), as the DecisionLog and heartbeat contracts ask.
pub fn parse_utc(text: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(text, &Rfc3339).ok().filter(|instant| instant.offset().is_utc())
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    #[test]
    fn formats_in_utc_to_the_millisecond_without_trailing_zeros() {
        assert_eq!(format(datetime!(2026-02-22 12:00:05 UTC)), "2026-02-22T12:00:05Z");
        assert_eq!(format(datetime!(2026-02-22 14:00:05.25 +02:00)), "2026-02-22T12:00:05.25Z");
        assert_eq!(format(datetime!(2026-02-22 12:00:05.000_123_456 UTC)), "2026-02-22T12:00:05Z");
        assert_eq!(format(datetime!(2026-02-22 12:00:05.850_023 UTC)), "2026-02-22T12:00:05.85Z");
        assert_eq!(format(datetime!(2026-02-22 12:00:05.001_999_999 UTC)), "2026-02-22T12:00:05.001Z");
        let made = datetime!(2026-02-22 12:00:05.250 UTC);
        assert_eq!(format(made), format_exact(made), "a whole millisecond is written as its fire_id embeds it");
    }

    #[test]
    fn exact_keeps_every_digit_the_instant_has() {
        assert_eq!(format_exact(datetime!(2026-02-22 12:00:05 UTC)), "2026-02-22T12:00:05Z");
        assert_eq!(format_exact(datetime!(2026-02-22 12:00:05.849 UTC)), "2026-02-22T12:00:05.849Z");
        assert_eq!(format_exact(datetime!(2026-02-22 12:00:05.850_023 UTC)), "2026-02-22T12:00:05.850023Z");
    }

    #[test]
    fn serde_writes_format_and_reads_any_offset() {
        #[derive(::serde::Serialize, ::serde::Deserialize, PartialEq, Debug)]
        struct At {
            #[serde(with = "super::serde")]
            at: OffsetDateTime,
            #[serde(with = "super::serde::option")]
            maybe: Option<OffsetDateTime>,
        }
        let at = At { at: datetime!(2026-02-22 12:00:05.850_023 UTC), maybe: None };
        let text = serde_json::to_string(&at).unwrap();
        assert_eq!(text, r#"{"at":"2026-02-22T12:00:05.85Z","maybe":null}"#);
        let back: At =
            serde_json::from_str(r#"{"at":"2026-02-22T14:00:05+02:00","maybe":"2026-02-22T12:00:05Z"}"#).unwrap();
        assert_eq!(back.at, datetime!(2026-02-22 12:00:05 UTC));
        assert_eq!(back.maybe, Some(datetime!(2026-02-22 12:00:05 UTC)));
    }

    #[test]
    fn parses_any_offset_into_utc_and_refuses_what_overflows() {
        assert_eq!(parse("2026-02-22T14:00:00+02:00"), Some(datetime!(2026-02-22 12:00:00 UTC)));
        assert_eq!(parse("2026-02-22T14:00:00+02:00").map(|instant| instant.offset()), Some(UtcOffset::UTC));
        // Year 10000 in UTC, and year 0 - 1: representable with their offset, not without.
        assert_eq!(parse("9999-12-31T23:59:59-01:00"), None);
        assert_eq!(parse("0000-01-01T00:00:00+01:00"), None);
        assert!(parse("9999-12-31T23:59:59Z").is_some());
        for bad in ["", "yesterday", "2026-02-22", "2026-02-22T12:00:00", "2026-13-01T00:00:00Z"] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn parse_utc_takes_only_a_zero_offset() {
        assert_eq!(parse_utc("2026-02-22T12:00:00Z"), Some(datetime!(2026-02-22 12:00:00 UTC)));
        assert!(parse_utc("2026-02-22T12:00:00+00:00").is_some());
        assert_eq!(parse_utc("2026-02-22T12:00:00+01:00"), None);
    }
}
