//! Reading the hook-server registration directory: the I/O around
//! `config`'s rules. A background task lists the directory and reads its
//! files, each step on the blocking pool with a timeout, and publishes the
//! result to the [`Registry`]; CRI calls only read what was published.
//!
//! A file is read only when `lstat` shows a regular file of at most
//! [`MAX_REGISTRATION_BYTES`]; it is then opened with
//! `O_NONBLOCK | O_NOFOLLOW | O_NOCTTY`, checked again with `fstat`, and
//! read to at most the limit. So a FIFO, a device or a link (for example to
//! `/dev/zero`) is never opened, and a file that grows while read stops at
//! the limit.

use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use koord_common::sync::MutexExt;
use rustix::fs::{Mode, OFlags};

use crate::config::{
    ConfigError, EntryKind, HookServerConfig, Registration, Registry, check_entry, merge_scan,
    parse_registration_bytes,
};
use crate::metrics::ProxyMetrics;

/// Largest registration file read, in bytes. Upstream's files, and the one
/// koordlet writes, are a few hundred bytes.
pub const MAX_REGISTRATION_BYTES: u64 = 64 * 1024;
/// Most `*.json` files the directory may hold. With more, it is not read
/// and the registrations stay as they were, so adding files can never push
/// a working registration out.
pub const MAX_REGISTRATION_FILES: usize = 64;
/// Longest wait for listing the directory or for reading one file.
pub const REGISTRATION_READ_TIMEOUT: Duration = Duration::from_secs(2);
/// Reads that missed their timeout and still run on the blocking pool; while
/// this many do, no new read starts (each holds a blocking-pool thread).
pub const MAX_STUCK_READS: usize = 4;
/// Longest wait of [`Registry::watch_with`] for the first scan.
pub const FIRST_SCAN_WAIT: Duration = Duration::from_secs(5);

/// Reads one registration file (blocking), at most `limit` bytes.
pub type FileReader = Arc<dyn Fn(&Path, u64) -> Result<Vec<u8>, ConfigError> + Send + Sync>;

/// How the directory is watched.
#[derive(Clone)]
pub struct WatchOptions {
    /// Pause between scans. A scan reads files only when the listing
    /// changed or the previous scan could not read everything.
    pub interval: Duration,
    pub read_timeout: Duration,
    pub max_file_bytes: u64,
    pub max_files: usize,
    pub max_stuck_reads: usize,
    /// [`read_registration`]; tests put a reader that never returns here.
    pub reader: FileReader,
}

impl Default for WatchOptions {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(1),
            read_timeout: REGISTRATION_READ_TIMEOUT,
            max_file_bytes: MAX_REGISTRATION_BYTES,
            max_files: MAX_REGISTRATION_FILES,
            max_stuck_reads: MAX_STUCK_READS,
            reader: Arc::new(read_registration),
        }
    }
}

/// One `*.json` entry as `lstat` describes it; the listing of a directory
/// is also its fingerprint (a change of any of these reloads it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedFile {
    pub path: PathBuf,
    pub kind: EntryKind,
    pub size: u64,
    pub modified: Option<SystemTime>,
    pub inode: u64,
}

/// The `*.json` entries of `dir` in name order, links not followed (blocking).
/// A missing directory has none; more than `max_files` is an error.
pub fn list_dir(dir: &Path, max_files: usize) -> Result<Vec<ListedFile>, ConfigError> {
    use std::os::unix::fs::MetadataExt;
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(ConfigError::Read {
                path: dir.to_path_buf(),
                source,
            });
        }
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| ConfigError::Read {
            path: dir.to_path_buf(),
            source,
        })?;
        let path = entry.path();
        if path.extension().is_none_or(|ext| ext != "json") {
            continue;
        }
        if files.len() == max_files {
            return Err(ConfigError::TooManyFiles {
                dir: dir.to_path_buf(),
                limit: max_files,
            });
        }
        // `DirEntry::metadata` does not follow links. An entry removed
        // since the listing is simply not there.
        let Ok(meta) = entry.metadata() else {
            continue;
        };
        files.push(ListedFile {
            path,
            kind: EntryKind::of(meta.file_type()),
            size: meta.len(),
            modified: meta.modified().ok(),
            inode: meta.ino(),
        });
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}

/// Reads one registration file (blocking): only a regular file of at most
/// `limit` bytes, checked before opening (`lstat`) and after (`fstat`),
/// opened without following links and without blocking on a FIFO, read to
/// at most `limit` bytes.
pub fn read_registration(path: &Path, limit: u64) -> Result<Vec<u8>, ConfigError> {
    let read_error = |source: std::io::Error| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::symlink_metadata(path).map_err(read_error)?;
    check_entry(path, EntryKind::of(meta.file_type()), meta.len(), limit)?;
    let flags =
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::NOCTTY | OFlags::CLOEXEC;
    let fd = match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(fd) => fd,
        // Replaced by a link since the lstat.
        Err(rustix::io::Errno::LOOP) => return Err(ConfigError::Symlink(path.to_path_buf())),
        Err(errno) => return Err(read_error(errno.into())),
    };
    let file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(read_error)?;
    check_entry(path, EntryKind::of(meta.file_type()), meta.len(), limit)?;
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    let size = bytes.len() as u64;
    if size > limit {
        return Err(ConfigError::TooLarge {
            path: path.to_path_buf(),
            size,
            limit,
        });
    }
    Ok(bytes)
}

/// Reads every `*.json` of `dir` in name order, in the calling thread and
/// without timeouts (for tools and tests; the proxy uses the watcher). Bad
/// files are reported and skipped.
pub fn load_dir(dir: &Path) -> (Vec<Registration>, Vec<ConfigError>) {
    let files = match list_dir(dir, MAX_REGISTRATION_FILES) {
        Ok(files) => files,
        Err(error) => return (Vec::new(), vec![error]),
    };
    let scanned = files
        .into_iter()
        .map(|file| {
            let result = read_registration(&file.path, MAX_REGISTRATION_BYTES)
                .and_then(|bytes| parse_registration_bytes(&file.path, &bytes));
            (file.path, result)
        })
        .collect();
    let merge = merge_scan(&[], scanned);
    let errors = merge.failed.into_iter().map(|(error, _)| error).collect();
    (merge.registrations, errors)
}

/// Removes its path from the set of running reads when the read ends, even
/// by a panic.
struct Running {
    set: Arc<Mutex<HashSet<PathBuf>>>,
    path: PathBuf,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.set.lock_or_recover().remove(&self.path);
    }
}

/// Clears the flag of a running listing when it ends.
struct Listing(Arc<AtomicBool>);

impl Drop for Listing {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// The directory watcher: the one writer of a [`Registry`].
struct Watcher {
    dir: PathBuf,
    options: WatchOptions,
    registry: Registry,
    metrics: ProxyMetrics,
    /// Reads started and not finished (a read that missed its timeout stays
    /// here until its thread returns).
    running: Arc<Mutex<HashSet<PathBuf>>>,
    listing: Arc<AtomicBool>,
    /// The listing whose files were all read, in the last scan; the same
    /// listing is not read again.
    settled: Option<Vec<ListedFile>>,
    /// Problems the last scan logged, so a repeated one is logged once.
    reported: HashSet<String>,
}

impl Watcher {
    async fn list(&self) -> Result<Vec<ListedFile>, ConfigError> {
        if self.listing.swap(true, Ordering::SeqCst) {
            return Err(ConfigError::ListTimeout {
                dir: self.dir.clone(),
                timeout: self.options.read_timeout,
            });
        }
        let guard = Listing(Arc::clone(&self.listing));
        let dir = self.dir.clone();
        let max_files = self.options.max_files;
        let listing = tokio::task::spawn_blocking(move || {
            let _guard = guard;
            list_dir(&dir, max_files)
        });
        match tokio::time::timeout(self.options.read_timeout, listing).await {
            Ok(Ok(result)) => result,
            Ok(Err(join)) => Err(ConfigError::Read {
                path: self.dir.clone(),
                source: std::io::Error::other(join.to_string()),
            }),
            Err(_) => Err(ConfigError::ListTimeout {
                dir: self.dir.clone(),
                timeout: self.options.read_timeout,
            }),
        }
    }

    async fn read(&self, path: &Path) -> Result<HookServerConfig, ConfigError> {
        {
            let mut running = self.running.lock_or_recover();
            if running.contains(path) {
                return Err(ConfigError::StillReading(path.to_path_buf()));
            }
            if running.len() >= self.options.max_stuck_reads {
                return Err(ConfigError::TooManyStuckReads {
                    path: path.to_path_buf(),
                    running: running.len(),
                });
            }
            running.insert(path.to_path_buf());
        }
        let guard = Running {
            set: Arc::clone(&self.running),
            path: path.to_path_buf(),
        };
        let reader = Arc::clone(&self.options.reader);
        let limit = self.options.max_file_bytes;
        let owned = path.to_path_buf();
        let reading = tokio::task::spawn_blocking(move || {
            let _guard = guard;
            reader(&owned, limit)
        });
        match tokio::time::timeout(self.options.read_timeout, reading).await {
            Ok(Ok(Ok(bytes))) => parse_registration_bytes(path, &bytes),
            Ok(Ok(Err(error))) => Err(error),
            Ok(Err(join)) => Err(ConfigError::Read {
                path: path.to_path_buf(),
                source: std::io::Error::other(join.to_string()),
            }),
            Err(_) => Err(ConfigError::Timeout {
                path: path.to_path_buf(),
                timeout: self.options.read_timeout,
            }),
        }
    }

    /// Logs (once while it repeats) and counts one problem.
    fn report(&self, reported: &mut HashSet<String>, error: &ConfigError, kept: bool) {
        self.metrics.registration_error(error.reason());
        let message = error.to_string();
        if !self.reported.contains(&message) {
            if kept {
                tracing::warn!(%error, reason = error.reason(), "hook-server registration not loaded; its previous registration stays");
            } else {
                tracing::warn!(%error, reason = error.reason(), "skipping hook-server registration");
            }
        }
        reported.insert(message);
    }

    /// One scan: list, read what changed, publish.
    async fn scan(&mut self) {
        let mut reported = HashSet::new();
        let files = match self.list().await {
            Ok(files) => files,
            Err(error) => {
                // Nothing is known about the files: all registrations stay.
                self.report(&mut reported, &error, true);
                self.settled = None;
                self.reported = reported;
                return;
            }
        };
        if self.settled.as_ref() == Some(&files) {
            return;
        }
        let mut scanned = Vec::with_capacity(files.len());
        for file in &files {
            let result = self.read(&file.path).await;
            scanned.push((file.path.clone(), result));
        }
        let previous = self.registry.snapshot();
        let merge = merge_scan(previous.files(), scanned);
        let mut retry = false;
        for (error, kept) in &merge.failed {
            retry |= error.is_transient();
            self.report(&mut reported, error, *kept);
        }
        for registration in &merge.registrations {
            if !merge.loaded.contains(&registration.file) {
                continue;
            }
            if let Some(warning) = registration.config.policy_warning() {
                tracing::warn!(
                    file = %registration.file.display(),
                    value = %registration.config.failure_policy_text,
                    "{warning}"
                );
            }
            tracing::info!(
                file = %registration.file.display(),
                endpoint = %registration.config.remote_endpoint,
                policy = ?registration.config.failure_policy,
                hooks = ?registration.config.runtime_hooks,
                "hook server registered"
            );
        }
        self.metrics
            .registrations(merge.registrations.len(), merge.failed.len());
        self.registry.publish(merge.registrations);
        self.settled = (!retry).then_some(files);
        self.reported = reported;
    }
}

impl Registry {
    /// Watches `dir` with the default limits, every `interval`; see
    /// [`Registry::watch_with`].
    pub async fn watch(dir: PathBuf, interval: Duration) -> Self {
        let options = WatchOptions {
            interval,
            ..WatchOptions::default()
        };
        Self::watch_with(dir, options, ProxyMetrics::default()).await
    }

    /// Starts the background task that scans `dir` now and then every
    /// `options.interval`, and waits up to [`FIRST_SCAN_WAIT`] for the
    /// first scan; if it takes longer, the registry fills in when it ends.
    pub async fn watch_with(dir: PathBuf, options: WatchOptions, metrics: ProxyMetrics) -> Self {
        let registry = Self::default();
        let interval = options.interval;
        let mut watcher = Watcher {
            dir: dir.clone(),
            options,
            registry: registry.clone(),
            metrics,
            running: Arc::default(),
            listing: Arc::default(),
            settled: None,
            reported: HashSet::new(),
        };
        let (first, first_done) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            watcher.scan().await;
            let _ = first.send(());
            loop {
                tokio::time::sleep(interval).await;
                watcher.scan().await;
            }
        });
        if tokio::time::timeout(FIRST_SCAN_WAIT, first_done)
            .await
            .is_err()
        {
            tracing::warn!(
                dir = %dir.display(),
                wait = ?FIRST_SCAN_WAIT,
                "the hook-server registration directory was not read in time; hook servers are \
                 registered when the scan ends"
            );
        }
        registry
    }
}
