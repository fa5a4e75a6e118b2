//! A throwaway Redis for tests: `redis-server` on a free loopback port, in a temporary directory, without
//! persistence (`--save '' --appendonly no`), stopped when dropped.
//!
//! It can be stopped and started again on the same port, so failover tests can take Redis away and bring it back
//! (empty: nothing is persisted, as after a restart of a Redis run without persistence).
//!
//! [`RedisServer::start_tls`] also listens with TLS (redis-server's `--tls-port`) under a throwaway certificate
//! authority made for it, and requires client certificates, as Redis does by default: [`RedisServer::tls`] has the
//! URL and the PEM files a client needs.
//!
//! When `redis-server` is not installed, [`RedisServer::start_or_skip`] prints one line and returns `None`, so the
//! test returns without asserting anything; under CI ([`crate::running_in_ci`]) it panics instead, so CI never passes by skipping.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::running_in_ci;

/// How long a started server may take to answer PING.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Ports tried before giving up when another process takes the free port between the probe and the start.
const PORT_ATTEMPTS: u32 = 5;
/// The environment variable naming the `redis-server` binary to use instead of the one on `PATH`.
pub const REDIS_SERVER_ENV: &str = "GATEWAY_TEST_REDIS_SERVER";

/// Why a throwaway Redis could not be started.
#[derive(Debug, thiserror::Error)]
pub enum RedisServerError {
    #[error("redis-server not found (install redis-server)")]
    NotFound,
    #[error("could not start redis-server: {0}")]
    Io(#[from] io::Error),
    #[error("redis-server did not answer PING within {0:?} (its log: {1})")]
    NotReady(Duration, PathBuf),
    #[error("could not make the test certificates: {0}")]
    Certificates(String),
}

/// What a client of a Redis with TLS needs: its `rediss://` URL and PEM files (in the server's directory).
#[derive(Debug, Clone)]
pub struct TlsEndpoint {
    pub port: u16,
    /// The certificate authority that signed the server's and the client's certificates.
    pub ca_file: PathBuf,
    pub client_cert_file: PathBuf,
    pub client_key_file: PathBuf,
    server_cert_file: PathBuf,
    server_key_file: PathBuf,
}

impl TlsEndpoint {
    /// `rediss://127.0.0.1:<port>/` (the server's certificate names 127.0.0.1 and localhost).
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}/", self.port)
    }
}

/// A `redis-server` child process on `127.0.0.1:<port>`.
#[derive(Debug)]
pub struct RedisServer {
    binary: PathBuf,
    port: u16,
    /// Holds the server's working directory (and its log) until the server is dropped.
    dir: tempfile::TempDir,
    child: Option<Child>,
    tls: Option<TlsEndpoint>,
}

impl RedisServer {
    /// Starts a server on a free port and waits until it answers PING.
    pub fn start() -> Result<Self, RedisServerError> {
        let binary = find_redis_server().ok_or(RedisServerError::NotFound)?;
        let dir = tempfile::Builder::new().prefix("gateway-redis-").tempdir()?;
        Self::start_in(binary, dir, false)
    }

    /// [`RedisServer::start`], also listening with TLS on a port of its own (client certificates required), under
    /// a certificate authority made for it.
    pub fn start_tls() -> Result<Self, RedisServerError> {
        let binary = find_redis_server().ok_or(RedisServerError::NotFound)?;
        let dir = tempfile::Builder::new().prefix("gateway-redis-tls-").tempdir()?;
        Self::start_in(binary, dir, true)
    }

    fn start_in(binary: PathBuf, dir: tempfile::TempDir, tls: bool) -> Result<Self, RedisServerError> {
        let tls = if tls { Some(make_certificates(dir.path())?) } else { None };
        let mut server = Self { binary, port: 0, dir, child: None, tls };
        let mut last_error = RedisServerError::NotFound;
        for _ in 0..PORT_ATTEMPTS {
            server.port = free_port()?;
            if let Some(tls) = server.tls.as_mut() {
                tls.port = free_port()?;
            }
            match server.start_again() {
                Ok(()) => return Ok(server),
                // Most likely another process took the port between the probe and the bind: try another one.
                Err(error) => last_error = error,
            }
        }
        Err(last_error)
    }

    /// [`RedisServer::start`], or `None` after printing `skipping <test>: redis-server not found (install
    /// redis-server)` when the binary is missing. Panics when it is missing under CI, or when the server is
    /// there but does not start.
    pub fn start_or_skip(test: &str) -> Option<Self> {
        match Self::start() {
            Ok(server) => Some(server),
            Err(RedisServerError::NotFound) => {
                skip_or_fail(test, running_in_ci());
                None
            }
            Err(error) => panic!("{test}: {error}"),
        }
    }

    /// [`RedisServer::start_tls`], or `None` after one printed line when `redis-server` is missing (a failure in
    /// CI), as [`RedisServer::start_or_skip`].
    pub fn start_tls_or_skip(test: &str) -> Option<Self> {
        match Self::start_tls() {
            Ok(server) => Some(server),
            Err(RedisServerError::NotFound) => {
                skip_or_fail(test, running_in_ci());
                None
            }
            Err(error) => panic!("{test}: {error}"),
        }
    }

    /// The TLS side of a server started by [`RedisServer::start_tls`].
    pub fn tls(&self) -> Option<&TlsEndpoint> {
        self.tls.as_ref()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>/`, what the gateway's `--redis-url` takes.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The server's process id while it runs (a benchmark pins it to CPUs and reads its CPU time).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// Kills the server (SIGKILL: like a crash; it has nothing to persist anyway) and waits until it is gone.
    /// Clients see their connections reset and new connections refused. Does nothing if it is stopped already.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port (empty: nothing was persisted) and waits for PING. Does nothing
    /// if it runs already.
    pub fn start_again(&mut self) -> Result<(), RedisServerError> {
        if self.is_running() {
            return Ok(());
        }
        let log = self.dir.path().join("redis.log");
        let mut command = Command::new(&self.binary);
        command.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]);
        if let Some(tls) = &self.tls {
            command.args(["--tls-port", &tls.port.to_string(), "--tls-auth-clients", "yes"]);
            command.arg("--tls-cert-file").arg(&tls.server_cert_file);
            command.arg("--tls-key-file").arg(&tls.server_key_file);
            command.arg("--tls-ca-cert-file").arg(&tls.ca_file);
        }
        let child = command
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(&log)
            .args(["--daemonize", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        self.child = Some(child);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if ping(self.port).is_ok() {
                return Ok(());
            }
            if !self.is_running() || Instant::now() >= deadline {
                self.stop();
                return Err(RedisServerError::NotReady(READY_TIMEOUT, log));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The directory the server runs in (its log is `redis.log` there).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A certificate authority, a server certificate for 127.0.0.1 and localhost, and a client certificate, all signed by
/// it, written as PEM files into `dir`.
fn make_certificates(dir: &Path) -> Result<TlsEndpoint, RedisServerError> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
    let failed = |error: rcgen::Error| RedisServerError::Certificates(error.to_string());
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(failed)?;
    ca_params.distinguished_name.push(DnType::CommonName, "gateway-testkit CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_key = KeyPair::generate().map_err(failed)?;
    let ca_cert = ca_params.self_signed(&ca_key).map_err(failed)?;
    let issuer = Issuer::new(ca_params, ca_key);
    let signed = |names: Vec<String>, common_name: &str| -> Result<(String, String), RedisServerError> {
        let mut params = CertificateParams::new(names).map_err(failed)?;
        params.distinguished_name.push(DnType::CommonName, common_name);
        let key = KeyPair::generate().map_err(failed)?;
        let cert = params.signed_by(&key, &issuer).map_err(failed)?;
        Ok((cert.pem(), key.serialize_pem()))
    };
    let (server_cert, server_key) = signed(vec!["localhost".into(), "127.0.0.1".into()], "localhost")?;
    let (client_cert, client_key) = signed(vec!["gateway-test-client".into()], "gateway-test-client")?;
    let write = |name: &str, pem: &str| -> Result<PathBuf, RedisServerError> {
        let path = dir.join(name);
        std::fs::write(&path, pem)?;
        Ok(path)
    };
    Ok(TlsEndpoint {
        port: 0,
        ca_file: write("ca.pem", &ca_cert.pem())?,
        client_cert_file: write("client.pem", &client_cert)?,
        client_key_file: write("client.key", &client_key)?,
        server_cert_file: write("server.pem", &server_cert)?,
        server_key_file: write("server.key", &server_key)?,
    })
}

/// `PING` over a raw connection: `Ok` once the server answers `+PONG`.
pub fn ping(port: u16) -> io::Result<()> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_millis(200))?;
    stream.set_read_timeout(Some(Duration::from_millis(500)))?;
    stream.write_all(b"PING\r\n")?;
    let mut reply = [0u8; 7];
    stream.read_exact(&mut reply)?;
    if &reply == b"+PONG\r\n" {
        Ok(())
    } else {
        // `-LOADING` and the like: not ready yet.
        Err(io::Error::other(String::from_utf8_lossy(&reply).into_owned()))
    }
}

/// `redis-server` from [`REDIS_SERVER_ENV`], or the first one on `PATH`.
pub fn find_redis_server() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(REDIS_SERVER_ENV) {
        let path = PathBuf::from(path);
        return path.is_file().then_some(path);
    }
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths).map(|dir| dir.join("redis-server")).find(|candidate| candidate.is_file())
}

/// What a test does when `redis-server` is missing: one line and return, or, in CI, fail.
fn skip_or_fail(test: &str, in_ci: bool) {
    assert!(
        !in_ci,
        "{test}: redis-server not found (install redis-server); CI is set, so this fails instead of skipping"
    );
    eprintln!("{}", skip_line(test));
}

fn skip_line(test: &str) -> String {
    format!("skipping {test}: redis-server not found (install redis-server)")
}

/// A port nothing listens on right now (the kernel's choice for port 0).
fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_answers_ping_stops_and_starts_again_on_the_same_port() {
        let Some(mut server) =
            RedisServer::start_or_skip("starts_answers_ping_stops_and_starts_again_on_the_same_port")
        else {
            return;
        };
        let port = server.port();
        assert_eq!(server.url(), format!("redis://127.0.0.1:{port}/"));
        assert!(server.is_running());
        let pid = server.pid().unwrap();
        assert!(std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap().contains("redis-server"));
        ping(port).unwrap();
        server.stop();
        assert!(!server.is_running());
        assert_eq!(server.pid(), None);
        assert!(ping(port).is_err(), "a stopped server refuses connections");
        server.stop();
        server.start_again().unwrap();
        assert_eq!(server.port(), port);
        ping(port).unwrap();
        server.start_again().unwrap();
        assert!(server.dir().join("redis.log").is_file());
    }

    #[test]
    fn dropping_the_server_stops_it_and_two_servers_get_two_ports() {
        let test = "dropping_the_server_stops_it_and_two_servers_get_two_ports";
        let Some(first) = RedisServer::start_or_skip(test) else { return };
        let second = RedisServer::start().unwrap();
        assert_ne!(first.port(), second.port());
        let (port, dir) = (first.port(), first.dir().to_path_buf());
        drop(first);
        assert!(ping(port).is_err());
        assert!(!dir.exists(), "the temporary directory goes with the server");
        ping(second.port()).unwrap();
    }

    #[test]
    fn a_missing_binary_skips_with_one_line_outside_ci_and_fails_in_ci() {
        assert_eq!(skip_line("some_test"), "skipping some_test: redis-server not found (install redis-server)");
        skip_or_fail("some_test", false);
        let in_ci = std::panic::catch_unwind(|| skip_or_fail("some_test", true));
        let message = in_ci.unwrap_err();
        let message = message.downcast_ref::<String>().unwrap();
        assert!(message.contains("some_test") && message.contains("CI is set"), "{message}");
    }

    /// The TLS port speaks TLS only: a plain PING there gets no PONG, while the plain port still answers.
    #[test]
    fn a_tls_server_listens_with_tls_on_its_own_port_with_its_certificates() {
        let Some(server) =
            RedisServer::start_tls_or_skip("a_tls_server_listens_with_tls_on_its_own_port_with_its_certificates")
        else {
            return;
        };
        let tls = server.tls().unwrap();
        assert_ne!(tls.port, server.port());
        assert_eq!(tls.url(), format!("rediss://127.0.0.1:{}/", tls.port));
        ping(server.port()).unwrap();
        assert!(ping(tls.port).is_err(), "plain text on the TLS port");
        for file in [&tls.ca_file, &tls.client_cert_file, &tls.client_key_file] {
            assert!(std::fs::read_to_string(file).unwrap().starts_with("-----BEGIN "), "{}", file.display());
        }
        assert!(RedisServer::start().unwrap().tls().is_none());
    }

    #[test]
    fn ping_fails_on_a_port_nobody_serves() {
        let port = free_port().unwrap();
        assert!(ping(port).is_err());
    }
}
