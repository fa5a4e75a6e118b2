//! The one backoff rule of every background loop (H-4 in docs/requirements.md: bounded, never unbounded).

use std::time::Duration;

/// The pause after `consecutive_failures` failures in a row: `initial`, doubled per further failure, never more
/// than `max`. Zero failures means no pause.
pub fn capped_backoff(initial: Duration, max: Duration, consecutive_failures: u32) -> Duration {
    if consecutive_failures == 0 {
        return Duration::ZERO;
    }
    let factor = 2u32.saturating_pow(consecutive_failures.saturating_sub(1).min(16));
    initial.saturating_mul(factor).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_the_first_failure_and_is_capped() {
        let initial = Duration::from_millis(250);
        let max = Duration::from_secs(30);
        let delays: Vec<_> = (0..=10).map(|failures| capped_backoff(initial, max, failures)).collect();
        assert_eq!(delays[0], Duration::ZERO);
        assert_eq!(delays[1], initial);
        assert_eq!(delays[2], initial * 2);
        assert_eq!(delays[3], initial * 4);
        assert!(delays.windows(2).all(|pair| pair[0] <= pair[1]));
        assert_eq!(delays[10], max);
        assert_eq!(capped_backoff(initial, max, u32::MAX), max);
    }
}
