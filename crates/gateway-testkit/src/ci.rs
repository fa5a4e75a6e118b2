//! Whether the tests run under CI, where a missing server binary or tool is a broken setup and fails the test
//! instead of skipping it.
//!
//! CI systems set `CI` in many spellings (`true`, `1`, `TRUE`, `yes`, a build number): any value other than empty,
//! `0` or `false` (in any case) counts. A test must never read `CI` itself: a check that only knows `true` lets a
//! CI that says `1` pass by skipping.

/// The environment variable CI systems set.
pub const CI_ENV: &str = "CI";

/// `true` when `CI` is set to anything but empty, `0` or `false`.
pub fn running_in_ci() -> bool {
    is_ci(std::env::var(CI_ENV).ok().as_deref())
}

/// The rule of [`running_in_ci`] for a value of `CI` (`None`: unset).
pub fn is_ci(value: Option<&str>) -> bool {
    value.map(str::trim).is_some_and(|value| !value.is_empty() && value != "0" && !value.eq_ignore_ascii_case("false"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_value_but_empty_zero_or_false_means_ci() {
        for value in ["true", "TRUE", "True", "1", "yes", "on", "woodpecker", "42"] {
            assert!(is_ci(Some(value)), "CI={value}");
        }
        for value in [None, Some(""), Some(" "), Some("0"), Some("false"), Some("FALSE"), Some("False")] {
            assert!(!is_ci(value), "CI={value:?}");
        }
    }
}
