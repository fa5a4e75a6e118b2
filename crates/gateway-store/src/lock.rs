//! One gateway per SQLite file: an exclusive lock on a sidecar file next to the database.
//!
//! The lock is taken on `<database>.lock`, never on the database file itself: SQLite keeps its own POSIX
//! locks on the database, and closing any descriptor of a file drops every POSIX lock the process holds on it,
//! so a second descriptor of ours could silently release SQLite's. The sidecar's lock is `flock`-style (std's
//! `File::try_lock`), held by the open file: it lasts as long as the [`DatabaseLock`] and the operating system
//! drops it when the process ends, however it ends (SIGKILL included), so a stale lock file never blocks a
//! restart. The file holds the holder's pid, for the message a second gateway prints.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::error::OpenError;

/// An exclusive hold on one database file, released when dropped.
#[derive(Debug)]
pub(crate) struct DatabaseLock {
    /// Never read: holding the open file is holding the lock.
    _file: File,
}

impl DatabaseLock {
    /// Locks `database` for this process, or says which process holds it.
    pub(crate) fn acquire(database: &Path) -> Result<Self, OpenError> {
        let lock_path = lock_path(database)?;
        let lock_error = |source: io::Error| OpenError::Lock { path: lock_path.clone(), source };
        // Not truncated on open: while another gateway holds the lock, its pid must stay readable.
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(lock_error)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(OpenError::InUse { path: database.to_owned(), holder_pid: holder_pid(&mut file) });
            }
            Err(fs::TryLockError::Error(error)) => return Err(lock_error(error)),
        }
        file.set_len(0).map_err(lock_error)?;
        file.seek(SeekFrom::Start(0)).map_err(lock_error)?;
        file.write_all(format!("{}\n", std::process::id()).as_bytes()).map_err(lock_error)?;
        Ok(Self { _file: file })
    }
}

/// `<database>.lock`, next to the file SQLite really opens: SQLite follows a symbolic link to the database,
/// so two gateways given different links to one file must meet at the same lock. (Hard links are not
/// resolved; nor does SQLite itself, which would then keep two write-ahead logs.)
pub(crate) fn lock_path(database: &Path) -> Result<PathBuf, OpenError> {
    let resolved = match fs::canonicalize(database) {
        Ok(resolved) => resolved,
        // Not created yet: its directory must exist (SQLite creates the file, not the directory).
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            let name = database
                .file_name()
                .ok_or_else(|| OpenError::InvalidUrl(format!("{} names no file", database.display())))?;
            let directory = match database.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => parent,
                _ => Path::new("."),
            };
            let directory =
                fs::canonicalize(directory).map_err(|source| OpenError::Lock { path: directory.to_owned(), source })?;
            directory.join(name)
        }
        Err(source) => return Err(OpenError::Lock { path: database.to_owned(), source }),
    };
    let mut name = resolved.into_os_string();
    name.push(".lock");
    Ok(PathBuf::from(name))
}

/// The pid the holder wrote, if it has written it yet (it writes right after taking the lock).
fn holder_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DatabaseUrl, DieselStore};

    fn open(path: &Path) -> Result<DieselStore, OpenError> {
        DieselStore::open(&DatabaseUrl::Sqlite(path.to_owned()))
    }

    // std's `File::try_lock` is `flock` on Unix: a lock belongs to an open file description, not to the
    // process, so a second open of the same file in this process conflicts just as another process would.
    #[test]
    fn a_second_store_on_the_file_is_refused_while_any_clone_of_the_first_lives() {
        let dir = tempfile::tempdir().unwrap();
        let database = dir.path().join("g.db");
        let first = open(&database).unwrap();
        let clone = first.clone();
        drop(first);
        match open(&database) {
            Err(error @ OpenError::InUse { .. }) => {
                let pid = std::process::id();
                assert_eq!(
                    error.to_string(),
                    format!("{} is in use by another gateway (pid {pid})", database.display())
                );
            }
            other => panic!("expected InUse, got {other:?}"),
        }
        assert_eq!(fs::read_to_string(dir.path().join("g.db.lock")).unwrap().trim(), std::process::id().to_string());
        drop(clone);
        open(&database).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_symbolic_link_to_the_database_meets_the_same_lock() {
        let dir = tempfile::tempdir().unwrap();
        let database = dir.path().join("g.db");
        let _held = open(&database).unwrap();
        let link = dir.path().join("link.db");
        std::os::unix::fs::symlink(&database, &link).unwrap();
        assert!(matches!(open(&link), Err(OpenError::InUse { .. })));
        assert_eq!(lock_path(&link).unwrap(), lock_path(&database).unwrap());
    }

    #[test]
    fn a_lock_file_left_by_a_killed_process_does_not_block_a_start() {
        let dir = tempfile::tempdir().unwrap();
        let database = dir.path().join("g.db");
        // What a killed holder leaves: the file and its pid, but no lock (the kernel dropped it with the process).
        fs::write(dir.path().join("g.db.lock"), "4194304\n").unwrap();
        let _store = open(&database).unwrap();
        assert_eq!(fs::read_to_string(dir.path().join("g.db.lock")).unwrap().trim(), std::process::id().to_string());
    }

    #[test]
    fn the_lock_file_sits_next_to_the_database_and_a_missing_directory_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let resolved = fs::canonicalize(dir.path()).unwrap();
        assert_eq!(lock_path(&dir.path().join("new.db")).unwrap(), resolved.join("new.db.lock"));
        let relative = lock_path(Path::new("gateway.db")).unwrap();
        assert_eq!(relative, std::env::current_dir().unwrap().canonicalize().unwrap().join("gateway.db.lock"));
        assert!(matches!(open(&dir.path().join("missing/g.db")), Err(OpenError::Lock { .. })));
    }
}
