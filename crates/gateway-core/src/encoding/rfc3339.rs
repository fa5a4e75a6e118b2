//! The one way instants are written and read as text: RFC 3339, always shown in UTC.
//!
//! Parsing never panics on what a client sends: an instant whose UTC form falls outside the calendar `time`
//! can represent (`9999-12-31T23:59:59-01:00` is year 10000 in UTC) is refused like any malformed text, rather
//! than reaching a conversion that would overflow.

use time::format_description::well_known::Rfc3339;
use time::{OffsetDateTime, UtcOffset};

/// `instant` as RFC 3339 in UTC (`2026-02-22T12:00:05.25Z`): fractional seconds only when there are any.
pub fn format(instant: OffsetDateTime) -> String {
    let utc = instant.checked_to_offset(UtcOffset::UTC).unwrap_or(instant);
    // Formatting fails only for years beyond four digits, which `parse` never lets in and clocks never reach.
    utc.format(&Rfc3339).unwrap_or_else(|_| utc.unix_timestamp().to_string())
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
    fn formats_in_utc_with_fractions_only_when_present() {
        assert_eq!(format(datetime!(2026-02-22 12:00:05 UTC)), "2026-02-22T12:00:05Z");
        assert_eq!(format(datetime!(2026-02-22 14:00:05.25 +02:00)), "2026-02-22T12:00:05.25Z");
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
