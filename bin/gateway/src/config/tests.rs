use super::*;

fn parse(args: &[&str]) -> Result<Config, clap::Error> {
    Config::try_parse_from(std::iter::once("gateway").chain(args.iter().copied()))
}

#[test]
fn defaults_are_the_contract() {
    let config = parse(&[]).unwrap();
    assert_eq!(config.listen, "127.0.0.1:4000".parse().unwrap());
    assert_eq!(config.database_url, DatabaseUrl::Sqlite("gateway.db".into()));
    assert_eq!(config.admin_token, None);
    assert_eq!(config.heartbeat_check_interval_ms, 30_000);
    assert_eq!(config.leader_lease_ttl_ms, 30_000);
    assert_eq!(config.lease_timings(), gateway_redis::LeaseTimings::default());
    assert_eq!(config.heartbeat_eviction_threshold_s, 90);
    assert_eq!(config.max_tracked_agents, 100_000);
    assert_eq!(config.retention().retention, Duration::from_secs(30 * 86_400));
    assert_eq!(config.mailbox(), gateway_cron::MailboxConfig::default());
    assert_eq!(config.mailbox().retention, Duration::from_secs(72 * 3_600));
    assert_eq!(config.tools().retention, Duration::from_secs(30 * 86_400));
    assert_eq!(config.cron().reminder_payload_max_bytes, 65_536);
    assert_eq!(config.cron().max_pending_reminders_per_agent, 1_000);
    assert!(!config.webhook_allow_private_targets);
    assert_eq!(config.log_format, LogFormat::Text);
    assert_eq!(config.agent_auth, AgentAuthMode::Auto);
    assert_eq!(config.agent_rate_limit(), Some(60));
}

#[test]
fn the_edges_flags_default_to_the_contract_and_refuse_what_cannot_work() {
    let edge = parse(&[]).unwrap().edge();
    assert_eq!(edge.max_inflight_body_bytes, 64 * 1024 * 1024);
    assert_eq!(edge.max_connections_per_address, 256);
    let set = parse(&["--max-inflight-body-bytes", "1048576", "--max-connections-per-address", "10000"]).unwrap();
    assert_eq!((set.edge().max_inflight_body_bytes, set.edge().max_connections_per_address), (1_048_576, 10_000));
    let largest = parse(&["--max-inflight-body-bytes", "68719476736"]).unwrap();
    assert_eq!(largest.edge().max_inflight_body_bytes, 64 << 30);
    for refused in [
        ["--max-inflight-body-bytes", "1048575"],
        ["--max-inflight-body-bytes", "0"],
        ["--max-inflight-body-bytes", "68719476737"],
        ["--max-connections-per-address", "0"],
        ["--max-connections-per-address", "10001"],
    ] {
        let error = parse(&refused).unwrap_err().to_string();
        assert!(error.contains(refused[0]), "{refused:?}: {error}");
    }
}

#[test]
fn the_loopback_rules_apply_where_agents_need_no_token_because_only_this_machine_connects() {
    let rules = |args: &[&str]| parse(args).unwrap().edge().loopback_rules;
    for loopback in ["127.0.0.1:4000", "[::1]:4000", "[::ffff:127.0.0.1]:4000"] {
        assert!(rules(&["--listen", loopback]), "{loopback}");
        assert!(!rules(&["--listen", loopback, "--agent-auth", "required"]), "{loopback}: tokens decide");
        assert!(!rules(&["--listen", loopback, "--agent-auth", "off"]), "{loopback}: the operator decided");
    }
    for exposed in ["0.0.0.0:4000", "[::]:4000", "10.1.2.3:4000"] {
        assert!(!rules(&["--listen", exposed]), "{exposed}");
        assert!(!rules(&["--listen", exposed, "--agent-auth", "off"]), "{exposed}");
    }
}

#[test]
fn auto_agent_auth_is_open_on_loopback_only() {
    let resolved = |args: &[&str]| {
        let config = parse(args).unwrap();
        (config.agent_auth_required(), config.agent_auth_off_exposed())
    };
    for loopback in ["127.0.0.1:4000", "127.10.0.1:4000", "[::1]:4000", "[::ffff:127.0.0.1]:4000"] {
        assert_eq!(resolved(&["--listen", loopback]), (false, false), "{loopback}");
        assert_eq!(resolved(&["--listen", loopback, "--agent-auth", "required"]), (true, false), "{loopback}");
        assert_eq!(resolved(&["--listen", loopback, "--agent-auth", "off"]), (false, false), "{loopback}");
    }
    for exposed in ["0.0.0.0:4000", "[::]:4000", "10.1.2.3:4000", "192.168.0.7:80"] {
        assert_eq!(resolved(&["--listen", exposed]), (true, false), "{exposed}");
        assert_eq!(resolved(&["--listen", exposed, "--agent-auth", "off"]), (false, true), "{exposed}");
    }
}

#[test]
fn the_agent_rate_limit_takes_zero_for_off() {
    assert_eq!(parse(&["--agent-rate-limit-per-minute", "0"]).unwrap().agent_rate_limit(), None);
    assert_eq!(parse(&["--agent-rate-limit-per-minute", "600"]).unwrap().agent_rate_limit(), Some(600));
    for bad in ["-1", "lots", "60001", ""] {
        let arg = format!("--agent-rate-limit-per-minute={bad}");
        let error = parse(&[&arg]).unwrap_err().render().to_string();
        assert!(error.lines().next().unwrap().contains("--agent-rate-limit-per-minute"), "{bad}: {error}");
    }
    let error = parse(&["--agent-auth", "sometimes"]).unwrap_err().render().to_string();
    assert!(error.lines().next().unwrap().contains("--agent-auth"), "{error}");
}

#[test]
fn a_postgres_url_is_accepted_and_never_shown() {
    let config = parse(&["--database-url=postgres://gw:hunter2@127.0.0.1:5432/gateway"]).unwrap();
    assert!(matches!(config.database_url, DatabaseUrl::Postgres(_)));
    assert!(!format!("{config:?}").contains("hunter2"));
}

#[test]
fn flags_override() {
    let config = parse(&[
        "--listen=0.0.0.0:8080",
        "--webhook-retry-schedule-s=1,2,3",
        "--webhook-allow-private-targets",
        "--log-format=json",
        "--admin-token=0123456789abcdef",
    ])
    .unwrap();
    assert_eq!(config.listen.port(), 8080);
    assert_eq!(
        config.webhook_retry_schedule_s,
        Some(gateway_webhooks::RetrySchedule::from_seconds(&[1, 2, 3]).unwrap())
    );
    assert!(config.webhook_allow_private_targets);
    assert_eq!(config.admin_token.unwrap().expose(), "0123456789abcdef");
    assert!(!parse(&["--webhook-allow-private-targets=false"]).unwrap().webhook_allow_private_targets);
}

#[test]
fn bad_values_name_their_flag() {
    let cases = [
        (vec!["--heartbeat-check-interval-ms=0"], "--heartbeat-check-interval-ms"),
        (vec!["--heartbeat-eviction-threshold-s=-5"], "--heartbeat-eviction-threshold-s"),
        (vec!["--max-tracked-agents=lots"], "--max-tracked-agents"),
        (vec!["--webhook-retry-schedule-s="], "--webhook-retry-schedule-s"),
        (vec!["--webhook-retry-schedule-s=30,,60"], "--webhook-retry-schedule-s"),
        (vec!["--webhook-max-per-cycle=0"], "--webhook-max-per-cycle"),
        (vec!["--database-url=mysql://x"], "--database-url"),
        (vec!["--database-url=postgres://h/db?sslmode=require"], "--database-url"),
        (vec!["--listen=nowhere"], "--listen"),
        (vec!["--admin-token=short"], "--admin-token"),
        (vec!["--webhook-timeout-ms=18446744073709551615"], "--webhook-timeout-ms"),
        (vec!["--webhook-timeout-ms=300001"], "--webhook-timeout-ms"),
        (vec!["--heartbeat-check-interval-ms=86400001"], "--heartbeat-check-interval-ms"),
        (vec!["--heartbeat-eviction-threshold-s=2592001"], "--heartbeat-eviction-threshold-s"),
        (vec!["--webhook-poll-interval-ms=86400001"], "--webhook-poll-interval-ms"),
        (vec!["--webhook-max-per-second=0"], "--webhook-max-per-second"),
        (vec!["--webhook-max-per-second=100001"], "--webhook-max-per-second"),
        (vec!["--max-tracked-agents=10000001"], "--max-tracked-agents"),
        (vec!["--retention-days=0"], "--retention-days"),
        (vec!["--retention-days=36501"], "--retention-days"),
        (vec!["--mailbox-retention-h=0"], "--mailbox-retention-h"),
        (vec!["--mailbox-retention-h=8761"], "--mailbox-retention-h"),
        (vec!["--mailbox-retention-h=three days"], "--mailbox-retention-h"),
        (vec!["--log-format=xml"], "--log-format"),
        (vec!["--leader-lease-ttl-ms=299"], "--leader-lease-ttl-ms"),
        (vec!["--leader-lease-ttl-ms=600001"], "--leader-lease-ttl-ms"),
        (vec!["--reminder-payload-max-bytes=0"], "--reminder-payload-max-bytes"),
        (vec!["--reminder-payload-max-bytes=1048577"], "--reminder-payload-max-bytes"),
        (vec!["--max-pending-reminders-per-agent=0"], "--max-pending-reminders-per-agent"),
        (vec!["--max-pending-reminders-per-agent=1000001"], "--max-pending-reminders-per-agent"),
    ];
    for (args, flag) in cases {
        let error = parse(&args).unwrap_err().render().to_string();
        let first_line = error.lines().next().unwrap();
        assert!(first_line.contains(flag), "{args:?}: {first_line}");
    }
}

#[test]
fn webhook_settings_default_to_the_crate_constants_and_follow_the_flags() {
    let defaults = parse(&[]).unwrap();
    assert_eq!(defaults.webhook_router(), gateway_webhooks::RouterConfig::default());
    assert_eq!(defaults.webhook_transport().timeout, gateway_webhooks::ATTEMPT_TIMEOUT);
    assert!(!defaults.webhook_transport().allow_private_targets);
    let config = parse(&[
        "--webhook-poll-interval-ms=250",
        "--webhook-max-per-cycle=2",
        "--webhook-retry-schedule-s=1,1,1,1,1",
        "--webhook-timeout-ms=1500",
        "--webhook-allow-private-targets",
    ])
    .unwrap();
    let router = config.webhook_router();
    assert_eq!(router.poll_interval, Duration::from_millis(250));
    assert_eq!(router.max_per_cycle, 2);
    assert_eq!(router.retry_schedule, gateway_webhooks::RetrySchedule::from_seconds(&[1; 5]).unwrap());
    assert_eq!(router.attempt_timeout, Duration::from_millis(1500));
    assert_eq!(
        config.webhook_transport(),
        gateway_webhooks::TransportSettings {
            timeout: Duration::from_millis(1500),
            allow_private_targets: true,
            max_in_flight: 2
        }
    );
    let too_long = parse(&["--webhook-retry-schedule-s=30,99999999"]).unwrap_err().render().to_string();
    assert!(too_long.lines().next().unwrap().contains("--webhook-retry-schedule-s"), "{too_long}");
}

#[test]
fn the_agent_limits_follow_their_flags() {
    let config =
        parse(&["--reminder-payload-max-bytes=1048576", "--max-pending-reminders-per-agent=3", "--retention-days=2"])
            .unwrap();
    let cron = config.cron();
    assert_eq!((cron.reminder_payload_max_bytes, cron.max_pending_reminders_per_agent), (1_048_576, 3));
    assert_eq!(cron.lookahead, gateway_cron::DEFAULT_LOOKAHEAD, "the rest are the crate's defaults");
    assert_eq!(config.tools().retention, Duration::from_secs(2 * 86_400));
    assert_eq!(parse(&[]).unwrap().agent_streams_per_address, 32);
    assert_eq!(parse(&["--agent-streams-per-address=1024"]).unwrap().agent_streams_per_address, 1_024);
    for refused in ["--agent-streams-per-address=0", "--agent-streams-per-address=1025"] {
        assert!(parse(&[refused]).is_err(), "{refused}");
    }
}

#[test]
fn the_per_agent_bounds_default_to_their_constants_and_are_bounded() {
    let defaults = parse(&[]).unwrap();
    assert_eq!(defaults.agent_streams_per_agent, gateway_auth::DEFAULT_STREAMS_PER_AGENT);
    assert_eq!(parse(&["--agent-streams-per-agent=1"]).unwrap().agent_streams_per_agent, 1);
    for refused in ["--agent-streams-per-agent=0", "--agent-streams-per-agent=1025"] {
        assert!(parse(&[refused]).is_err(), "{refused}");
    }
    assert_eq!(defaults.agent_storage_quota_bytes, 16 * 1024 * 1024);
    assert_eq!(defaults.cron().agent_storage_quota_bytes, 16 * 1024 * 1024);
    let small = parse(&["--agent-storage-quota-bytes=4096"]).unwrap();
    assert_eq!(small.cron().agent_storage_quota_bytes, 4_096);
    for refused in ["--agent-storage-quota-bytes=0", "--agent-storage-quota-bytes=1099511627777"] {
        assert!(parse(&[refused]).is_err(), "{refused}");
    }
}

/// The last-use interval defaults to gateway-auth's constant and stays within what its cache can honour (an entry
/// idle for 60 s is dropped); the history's flush interval is bounded both ways.
#[test]
fn the_last_use_and_history_intervals_default_and_are_bounded() {
    let defaults = parse(&[]).unwrap();
    assert_eq!(
        defaults.auth(gateway_auth::OperatorToken::Disabled).credential_use_record_interval,
        gateway_auth::CREDENTIAL_USE_RECORD_INTERVAL
    );
    assert_eq!(defaults.history_flush_interval_ms, 5_000);
    let short = parse(&["--last-use-interval-s=1", "--history-flush-interval-ms=100"]).unwrap();
    assert_eq!(
        short.auth(gateway_auth::OperatorToken::Disabled).credential_use_record_interval,
        Duration::from_secs(1)
    );
    assert_eq!(short.history_flush_interval_ms, 100);
    for refused in [
        "--last-use-interval-s=0",
        "--last-use-interval-s=31",
        "--history-flush-interval-ms=99",
        "--history-flush-interval-ms=60001",
    ] {
        assert!(parse(&[refused]).is_err(), "{refused}");
    }
    assert!(
        gateway_auth::MAX_CREDENTIAL_USE_RECORD_INTERVAL * 2 <= gateway_auth::CREDENTIAL_IDLE_AFTER,
        "recorded before the sweep drops an idle entry"
    );
}

/// gateway-auth gets the agent-auth mode as resolved against the listener, and the per-agent limits' flags.
#[test]
fn the_auth_settings_are_the_flags() {
    let open = parse(&["--listen", "127.0.0.1:0", "--agent-rate-limit-per-minute", "0"]).unwrap();
    let auth = open.auth(gateway_auth::OperatorToken::Disabled);
    assert!(!auth.agent_tokens_required);
    assert_eq!(auth.rate_limit_per_minute, 0);
    let args = ["--listen", "0.0.0.0:0", "--agent-streams-per-address=3", "--agent-streams-per-agent=2"];
    let auth = parse(&args).unwrap().auth(gateway_auth::OperatorToken::Disabled);
    assert!(auth.agent_tokens_required);
    assert_eq!((auth.rate_limit_per_minute, auth.streams_per_address, auth.streams_per_agent), (60, 3, 2));
    assert_eq!(auth.max_agent_streams, gateway_auth::MAX_AGENT_STREAMS);
}

#[test]
fn refused_secrets_are_not_repeated_in_the_error() {
    for args in [
        ["--admin-token=hunter2-short"],
        ["--admin-token=has a space in it, hunter2"],
        ["--database-url=mysql://user:hunter2@db.internal/gateway"],
        ["--redis-url=http://:hunter2@cache.internal:6379"],
        ["--database-url=postgres://user:hunter2@db.internal/gateway?sslmode=verify-full"],
    ] {
        let error = parse(&args).unwrap_err().render().to_string();
        assert!(!error.contains("hunter2"), "{error}");
        let flag = args[0].split('=').next().unwrap();
        assert!(error.lines().next().unwrap().contains(flag), "{error}");
    }
}

#[test]
fn the_largest_accepted_values_parse() {
    let config = parse(&[
        "--webhook-timeout-ms=300000",
        "--heartbeat-check-interval-ms=86400000",
        "--webhook-max-per-second=100000",
        "--mailbox-retention-h=8760",
    ])
    .unwrap();
    assert_eq!(config.mailbox().retention, Duration::from_secs(365 * 86_400));
    assert_eq!(config.webhook_attempt_timeout(), Duration::from_secs(300));
    assert_eq!(config.webhook_max_per_second(), 100_000);
    assert_eq!(parse(&[]).unwrap().webhook_max_per_second(), gateway_webhooks::DEFAULT_MAX_PER_SECOND);
}

#[test]
fn cluster_flags_parse_and_sqlite_with_redis_is_refused() {
    let config = parse(&[
        "--instance-id=gw-a.1",
        "--redis-url=redis://127.0.0.1:6379/0",
        "--database-url=postgres://gateway@127.0.0.1/gateway",
        "--cluster-secret=0123456789abcdef0123456789abcdef",
    ])
    .unwrap()
    .checked()
    .unwrap();
    assert_eq!(config.instance_id().as_str(), "gw-a.1");
    assert!(!format!("{config:?}").contains("6379"), "the Redis URL is never printed");
    let refused = parse(&["--redis-url=redis://127.0.0.1:6379/0"]).unwrap().checked().unwrap_err().to_string();
    assert!(refused.contains("--redis-url") && refused.contains("sqlite://"), "{refused}");
    for bad in [["--instance-id=has space"], ["--instance-id="], ["--redis-url=http://x"]] {
        assert!(parse(&bad).is_err(), "{bad:?}");
    }
    let random = parse(&[]).unwrap().instance_id();
    assert!(random.as_str().starts_with("gw-") && random.as_str().len() == 15, "{random}");
    assert_ne!(random, parse(&[]).unwrap().instance_id());
}

#[test]
fn redis_needs_a_cluster_secret_of_32_bytes_which_is_never_shown() {
    let cluster = ["--redis-url=redis://127.0.0.1:6379/0", "--database-url=postgres://gateway@127.0.0.1/gateway"];
    let line = |args: &[&str]| {
        let error = parse(args).and_then(Config::checked).unwrap_err().render().to_string();
        error.lines().find(|line| !line.trim().is_empty()).unwrap().to_owned()
    };
    let missing = line(&cluster);
    assert!(missing.contains("--cluster-secret") && missing.contains("--redis-url"), "{missing}");
    let short = line(&[&cluster[..], &["--cluster-secret=hunter2-but-only-31-bytes-long"]].concat());
    assert!(short.contains("--cluster-secret") && short.contains("32"), "{short}");
    assert!(!short.contains("hunter2"), "{short}");
    let secret = "--cluster-secret=  hunter2 hunter2 hunter2 hunter2 hunter2\n";
    let config = parse(&[&cluster[..], &[secret]].concat()).unwrap().checked().unwrap();
    assert!(!format!("{config:?}").contains("hunter2"));
    assert_eq!(config.cluster_secret.as_ref().unwrap().expose(), b"hunter2 hunter2 hunter2 hunter2 hunter2");
    assert!(config.cluster_keys().unwrap().is_ok());

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("secret");
    std::fs::write(&file, "hunter2-hunter2-hunter2-hunter2-new\nhunter2-hunter2-hunter2-hunter2-old\n").unwrap();
    let from_file = format!("--cluster-secret-file={}", file.display());
    let config = parse(&[&cluster[..], &[&from_file]].concat()).unwrap().checked().unwrap();
    let loaded = config.cluster_secret_file.as_ref().unwrap();
    assert_eq!(loaded.secret.expose(), b"hunter2-hunter2-hunter2-hunter2-new");
    assert_eq!(loaded.previous.as_ref().unwrap().expose(), b"hunter2-hunter2-hunter2-hunter2-old");
    assert!(!format!("{config:?}").contains("hunter2"));
    std::fs::write(&file, "hunter2\n").unwrap();
    let short = line(&[&cluster[..], &[&from_file]].concat());
    assert!(short.contains("--cluster-secret-file") && !short.contains("hunter2"), "{short}");
    let missing_file = format!("--cluster-secret-file={}", dir.path().join("none").display());
    assert!(line(&[&cluster[..], &[&missing_file]].concat()).contains("--cluster-secret-file"));
    let both = line(&[&cluster[..], &[secret, &from_file]].concat());
    assert!(both.contains("--cluster-secret"), "{both}");
}

#[test]
fn redis_tls_takes_a_ca_and_a_client_certificate_only_with_rediss_and_never_insecure() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").unwrap();
    let key = dir.path().join("key.pem");
    std::fs::write(&key, "-----BEGIN PRIVATE KEY-----\nhunter2\n-----END PRIVATE KEY-----\n").unwrap();
    let secret = "--cluster-secret=0123456789abcdef0123456789abcdef";
    let database = "--database-url=postgres://gateway@127.0.0.1/gateway";
    let ca_flag = format!("--redis-ca-file={}", ca.display());
    let line = |args: &[&str]| {
        let error = parse(args).and_then(Config::checked).unwrap_err().render().to_string();
        error.lines().find(|line| !line.trim().is_empty()).unwrap().to_owned()
    };
    let config =
        parse(&["--redis-url=rediss://cache.internal:6380/0", database, secret, &ca_flag]).unwrap().checked().unwrap();
    let tls = config.redis_tls().unwrap();
    assert!(tls.root_cert.is_some() && tls.client_tls.is_none());
    assert!(!format!("{config:?}").contains("MIIB"));
    let plain = line(&["--redis-url=redis://cache.internal:6379/0", database, secret, &ca_flag]);
    assert!(plain.contains("--redis-ca-file") && plain.contains("rediss://"), "{plain}");
    let insecure = line(&["--redis-url=rediss://cache.internal:6380/#insecure"]);
    assert!(insecure.contains("--redis-url") && insecure.contains("--redis-ca-file"), "{insecure}");
    let not_a_key = format!("--redis-client-key-file={}", ca.display());
    let cert = format!("--redis-client-cert-file={}", ca.display());
    let refused = line(&["--redis-url=rediss://cache.internal:6380/0", database, secret, &cert, &not_a_key]);
    assert!(refused.contains("--redis-client-key-file") && !refused.contains("MIIB"), "{refused}");
    let key_flag = format!("--redis-client-key-file={}", key.display());
    let alone = line(&["--redis-url=rediss://cache.internal:6380/0", database, secret, &cert]);
    assert!(alone.contains("--redis-client-key-file"), "{alone}");
    let mutual = parse(&["--redis-url=rediss://cache.internal:6380/0", database, secret, &cert, &key_flag])
        .unwrap()
        .checked()
        .unwrap();
    assert!(mutual.redis_tls().unwrap().client_tls.is_some());
    assert!(!format!("{mutual:?}").contains("hunter2"));
    assert!(parse(&[]).unwrap().redis_tls().is_none());
}

#[test]
fn the_server_is_the_default_and_admin_token_rotate_takes_the_database_url_after_it() {
    assert_eq!(parse(&["--listen=127.0.0.1:0"]).unwrap().command, None);
    let rotate = Some(Command::AdminToken(AdminTokenCommand::Rotate));
    for args in [
        &["admin-token", "rotate", "--database-url", "sqlite:///tmp/x.db"][..],
        &["--database-url", "sqlite:///tmp/x.db", "admin-token", "rotate"][..],
    ] {
        let config = parse(args).unwrap();
        assert_eq!(config.command, rotate, "{args:?}");
        assert_eq!(config.database_url, DatabaseUrl::Sqlite("/tmp/x.db".into()), "{args:?}");
    }
    assert!(parse(&["admin-token"]).is_err(), "rotate is the one admin-token command");
    assert!(parse(&["admin-token", "show"]).is_err(), "a stored token cannot be shown");
}

#[test]
fn the_token_never_shows_in_debug() {
    let config = parse(&["--admin-token=super-secret-token-value"]).unwrap();
    assert!(!format!("{config:?}").contains("super-secret"));
}

#[test]
fn disable_after_failures_defaults_to_the_webhook_crates_constant_and_zero_means_never() {
    assert_eq!(
        parse(&[]).unwrap().webhook_router().disable_after_failures,
        gateway_webhooks::DEFAULT_DISABLE_AFTER_FAILURES
    );
    assert_eq!(parse(&["--webhook-disable-after-failures=3"]).unwrap().webhook_router().disable_after_failures, 3);
    assert_eq!(parse(&["--webhook-disable-after-failures=0"]).unwrap().webhook_router().disable_after_failures, 0);
    assert!(parse(&["--webhook-disable-after-failures=-1"]).is_err());
    assert!(parse(&["--webhook-disable-after-failures=many"]).is_err());
}
