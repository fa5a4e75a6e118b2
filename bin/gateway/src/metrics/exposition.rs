//! Which text format a scrape gets, and the classic Prometheus format made from the OpenMetrics one.
//!
//! prometheus-client writes OpenMetrics only. Prometheus asks for OpenMetrics first by default, but a server
//! configured with `scrape_protocols: [PrometheusText0.0.4]`, older Prometheus versions, and many other scrapers
//! (Telegraf, Datadog's openmetrics check in its v1 mode, `promtool check metrics` reading a file) want the classic
//! `text/plain; version=0.0.4`. The two differ in few places for the families this gateway has (counters, gauges,
//! histograms; no info, stateset or exemplars): a counter's family is named without `_total` in OpenMetrics and with
//! it in the classic format; `# UNIT` and `# EOF` exist only in OpenMetrics. So the classic body is the OpenMetrics
//! body rewritten line by line, rather than a second encoder that could drift from the first.

use http::HeaderValue;

/// `Content-Type` of the OpenMetrics text, what prometheus-client writes.
pub(crate) const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// `Content-Type` of the classic Prometheus text format.
pub(crate) const CLASSIC_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// The most media ranges of an `Accept` header looked at: a scraper sends four or five; the rest is ignored.
const MAX_MEDIA_RANGES: usize = 16;

/// The text format of one scrape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exposition {
    OpenMetrics,
    Classic,
}

impl Exposition {
    /// The format the `Accept` header prefers: the classic one only when `text/plain` is asked for with a higher
    /// quality than `application/openmetrics-text` (or without it at all). No header, `*/*`, or a header that
    /// cannot be read keeps OpenMetrics, what this endpoint always answered.
    pub(crate) fn negotiate(accept: Option<&HeaderValue>) -> Self {
        let Some(accept) = accept.and_then(|value| value.to_str().ok()) else {
            return Self::OpenMetrics;
        };
        let mut openmetrics: Option<f32> = None;
        let mut classic: Option<f32> = None;
        for range in accept.split(',').take(MAX_MEDIA_RANGES) {
            let mut parts = range.split(';');
            let media_type = parts.next().unwrap_or_default().trim();
            let quality = parts
                .filter_map(|parameter| parameter.split_once('='))
                .find(|(name, _)| name.trim().eq_ignore_ascii_case("q"))
                .map_or(Some(1.0), |(_, value)| value.trim().parse::<f32>().ok().filter(|q| (0.0..=1.0).contains(q)));
            let Some(quality) = quality else { continue };
            let slot = if media_type.eq_ignore_ascii_case("application/openmetrics-text") {
                &mut openmetrics
            } else if media_type.eq_ignore_ascii_case("text/plain") {
                &mut classic
            } else {
                continue;
            };
            *slot = Some(slot.map_or(quality, |seen: f32| seen.max(quality)));
        }
        match (openmetrics, classic) {
            (Some(openmetrics), Some(classic)) if classic > openmetrics => Self::Classic,
            (None, Some(classic)) if classic > 0.0 => Self::Classic,
            _ => Self::OpenMetrics,
        }
    }

    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Self::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
            Self::Classic => CLASSIC_CONTENT_TYPE,
        }
    }
}

/// The classic text format of an OpenMetrics exposition written by prometheus-client.
pub(crate) fn classic_from_openmetrics(openmetrics: &str) -> String {
    let mut classic = String::with_capacity(openmetrics.len());
    // A counter's HELP comes before its TYPE; both name the family, which the classic format names with `_total`.
    let mut counters = std::collections::HashSet::new();
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ")
            && let Some((family, "counter")) = rest.split_once(' ')
        {
            counters.insert(family);
        }
    }
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let comment = ["# HELP ", "# TYPE "].into_iter().find(|prefix| line.starts_with(prefix));
        if let Some(prefix) = comment {
            let rest = &line[prefix.len()..];
            let (family, text) = rest.split_once(' ').unwrap_or((rest, ""));
            classic.push_str(prefix);
            classic.push_str(family);
            if counters.contains(family) {
                classic.push_str("_total");
            }
            if !text.is_empty() {
                classic.push(' ');
                classic.push_str(text);
            }
        } else {
            classic.push_str(line);
        }
        classic.push('\n');
    }
    classic
}

#[cfg(test)]
mod tests {
    use super::*;

    fn negotiate(accept: &str) -> Exposition {
        Exposition::negotiate(Some(&HeaderValue::from_str(accept).unwrap()))
    }

    #[test]
    fn openmetrics_unless_the_classic_format_is_preferred() {
        assert_eq!(Exposition::negotiate(None), Exposition::OpenMetrics);
        assert_eq!(negotiate("*/*"), Exposition::OpenMetrics);
        // Prometheus's default scrape protocols.
        assert_eq!(
            negotiate(
                "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,\
                 text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
            ),
            Exposition::OpenMetrics
        );
        // `scrape_protocols: [PrometheusText0.0.4]`.
        assert_eq!(negotiate("text/plain;version=0.0.4;q=0.9,*/*;q=0.1"), Exposition::Classic);
        assert_eq!(negotiate("text/plain"), Exposition::Classic);
        assert_eq!(negotiate("application/openmetrics-text;q=0.2, text/plain;q=0.8"), Exposition::Classic);
        assert_eq!(negotiate("text/plain;q=0"), Exposition::OpenMetrics);
        assert_eq!(negotiate("text/plain;q=abc"), Exposition::OpenMetrics);
    }

    #[test]
    fn counters_are_named_with_total_and_openmetrics_only_lines_go() {
        let openmetrics = "# HELP gateway_heartbeats Heartbeats accepted.\n# TYPE gateway_heartbeats counter\n\
                           gateway_heartbeats_total 3\n# HELP gateway_leader Whether this instance leads.\n\
                           # TYPE gateway_leader gauge\ngateway_leader 1\n# HELP gateway_fire_lateness_seconds Late.\n\
                           # TYPE gateway_fire_lateness_seconds histogram\n# UNIT gateway_fire_lateness_seconds seconds\n\
                           gateway_fire_lateness_seconds_bucket{le=\"+Inf\"} 1\n# EOF\n";
        assert_eq!(
            classic_from_openmetrics(openmetrics),
            "# HELP gateway_heartbeats_total Heartbeats accepted.\n# TYPE gateway_heartbeats_total counter\n\
             gateway_heartbeats_total 3\n# HELP gateway_leader Whether this instance leads.\n\
             # TYPE gateway_leader gauge\ngateway_leader 1\n# HELP gateway_fire_lateness_seconds Late.\n\
             # TYPE gateway_fire_lateness_seconds histogram\ngateway_fire_lateness_seconds_bucket{le=\"+Inf\"} 1\n"
        );
    }
}
