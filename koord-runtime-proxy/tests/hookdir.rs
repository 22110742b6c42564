#![allow(clippy::unwrap_used)]
//! The registration directory: which entries are read (regular files within
//! the size limit, never links, FIFOs or devices), how a scan changes the
//! registrations (a file that fails keeps what it had), and the watcher's
//! timeouts (a read that never returns holds up neither the other files nor
//! CRI calls). Every wait is bounded.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use koord_common::testing::TempDir;
use koord_runtime_proxy::config::{
    ConfigError, HookServerConfig, HookType, Registration, Registry, merge_scan, parse_registration,
};
use koord_runtime_proxy::hookdir::{
    MAX_REGISTRATION_BYTES, WatchOptions, list_dir, read_registration,
};
use koord_runtime_proxy::metrics::ProxyMetrics;

const WAIT: Duration = Duration::from_secs(30);

fn registration_json(endpoint: &str, hooks: &[&str]) -> String {
    serde_json::json!({
        "remote-endpoint": endpoint,
        "failure-policy": "Ignore",
        "runtime-hooks": hooks,
    })
    .to_string()
}

/// Runs `read` on its own thread and fails the test if it does not return
/// within `WAIT` (a blocking open of a FIFO would never return).
fn bounded_read(path: &Path) -> Result<Vec<u8>, ConfigError> {
    let (done, result) = std::sync::mpsc::channel();
    let owned = path.to_path_buf();
    std::thread::spawn(move || {
        let _ = done.send(read_registration(&owned, MAX_REGISTRATION_BYTES));
    });
    result
        .recv_timeout(WAIT)
        .unwrap_or_else(|_| panic!("reading {} did not return", path.display()))
}

#[test]
fn only_regular_files_within_the_limit_are_read() {
    let dir = TempDir::new("koord-rp-entries").unwrap();
    let good = dir.path().join("good.json");
    std::fs::write(&good, registration_json("/k.sock", &["PreCreateContainer"])).unwrap();
    assert_eq!(bounded_read(&good).unwrap(), std::fs::read(&good).unwrap());

    let fifo = dir.path().join("fifo.json");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    let error = bounded_read(&fifo).unwrap_err();
    assert!(
        matches!(error, ConfigError::NotRegularFile { kind: "FIFO", .. }),
        "{error}"
    );
    assert_eq!(error.reason(), "not_regular_file");
    assert!(error.to_string().contains("fifo.json"), "{error}");

    // A link is refused whatever it points at: a device, or a good file.
    for (name, target) in [("zero.json", Path::new("/dev/zero")), ("link.json", &good)] {
        let link = dir.path().join(name);
        std::os::unix::fs::symlink(target, &link).unwrap();
        let error = bounded_read(&link).unwrap_err();
        assert!(matches!(error, ConfigError::Symlink(_)), "{error}");
        assert_eq!(error.reason(), "symlink");
    }

    let subdir = dir.path().join("dir.json");
    std::fs::create_dir(&subdir).unwrap();
    let error = bounded_read(&subdir).unwrap_err();
    assert!(
        matches!(
            error,
            ConfigError::NotRegularFile {
                kind: "directory",
                ..
            }
        ),
        "{error}"
    );

    // The limit is inclusive; one byte more is refused before reading, with
    // the file and the limit named.
    let limit = usize::try_from(MAX_REGISTRATION_BYTES).unwrap();
    let full = dir.path().join("full.json");
    std::fs::write(&full, vec![b' '; limit]).unwrap();
    assert_eq!(bounded_read(&full).unwrap().len(), limit);
    let over = dir.path().join("over.json");
    std::fs::write(&over, vec![b' '; limit + 1]).unwrap();
    let error = bounded_read(&over).unwrap_err();
    assert!(matches!(error, ConfigError::TooLarge { .. }), "{error}");
    let message = error.to_string();
    assert!(message.contains("over.json"), "{message}");
    assert!(message.contains(&limit.to_string()), "{message}");

    // The listing describes entries without following or opening them.
    let listed = list_dir(dir.path(), 64).unwrap();
    let names: Vec<_> = listed
        .iter()
        .map(|file| file.path.file_name().unwrap().to_str().unwrap().to_string())
        .collect();
    assert_eq!(
        names,
        [
            "dir.json",
            "fifo.json",
            "full.json",
            "good.json",
            "link.json",
            "over.json",
            "zero.json"
        ]
    );
    assert!(matches!(
        list_dir(dir.path(), 6),
        Err(ConfigError::TooManyFiles { limit: 6, .. })
    ));
    assert!(list_dir(&dir.path().join("missing"), 6).unwrap().is_empty());
}

fn config(endpoint: &str) -> HookServerConfig {
    parse_registration(
        Path::new("/x.json"),
        &registration_json(endpoint, &["PreCreateContainer"]),
    )
    .unwrap()
}

fn registration(file: &str, endpoint: &str) -> Registration {
    Registration {
        file: PathBuf::from(file),
        config: Arc::new(config(endpoint)),
    }
}

#[test]
fn a_file_that_fails_keeps_its_previous_registration() {
    let previous = [
        registration("/d/a.json", "/a-old.sock"),
        registration("/d/b.json", "/b-old.sock"),
        registration("/d/gone.json", "/gone.sock"),
    ];
    let scanned = vec![
        (PathBuf::from("/d/a.json"), Ok(config("/a-new.sock"))),
        (
            PathBuf::from("/d/b.json"),
            Err(ConfigError::NoEndpoint("/d/b.json".into())),
        ),
        (
            PathBuf::from("/d/c.json"),
            Err(ConfigError::Symlink("/d/c.json".into())),
        ),
        (PathBuf::from("/d/d.json"), Ok(config("/d.sock"))),
    ];
    let merge = merge_scan(&previous, scanned);
    let endpoints: Vec<_> = merge
        .registrations
        .iter()
        .map(|r| (r.file.to_str().unwrap(), r.config.remote_endpoint.as_str()))
        .collect();
    assert_eq!(
        endpoints,
        [
            ("/d/a.json", "/a-new.sock"),
            ("/d/b.json", "/b-old.sock"),
            ("/d/d.json", "/d.sock"),
        ]
    );
    assert_eq!(
        merge.loaded,
        [PathBuf::from("/d/a.json"), PathBuf::from("/d/d.json")]
    );
    let failed: Vec<_> = merge
        .failed
        .iter()
        .map(|(error, kept)| (error.reason(), *kept))
        .collect();
    assert_eq!(failed, [("invalid", true), ("symlink", false)]);
}

async fn wait_until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn endpoint(registry: &Registry, hook: HookType) -> Option<String> {
    registry
        .server_for(hook)
        .map(|server| server.remote_endpoint.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_that_never_returns_holds_up_nothing_else() {
    let dir = TempDir::new("koord-rp-stuck-read").unwrap();
    let slow = dir.path().join("a-slow.json");
    let good = dir.path().join("b-good.json");
    std::fs::write(
        &slow,
        registration_json("/slow-1.sock", &["PreRunPodSandbox"]),
    )
    .unwrap();
    std::fs::write(
        &good,
        registration_json("/good-1.sock", &["PreCreateContainer"]),
    )
    .unwrap();

    // The reader hangs on a-slow.json while `hang` holds a sender, as a
    // read from a stuck file system would.
    let hang: Arc<Mutex<Option<std::sync::mpsc::Receiver<()>>>> = Arc::default();
    let slow_reads = Arc::new(AtomicUsize::new(0));
    let reader = {
        let hang = Arc::clone(&hang);
        let slow_reads = Arc::clone(&slow_reads);
        let slow = slow.clone();
        move |path: &Path, limit: u64| {
            if path == slow {
                slow_reads.fetch_add(1, Ordering::SeqCst);
                let blocker = hang.lock().unwrap().take();
                if let Some(blocker) = blocker {
                    let _ = blocker.recv_timeout(WAIT);
                }
            }
            read_registration(path, limit)
        }
    };
    let metrics = ProxyMetrics::default();
    let options = WatchOptions {
        interval: Duration::from_millis(50),
        read_timeout: Duration::from_millis(300),
        reader: Arc::new(reader),
        ..WatchOptions::default()
    };
    let registry = Registry::watch_with(dir.path().to_path_buf(), options, metrics.clone()).await;
    assert_eq!(
        endpoint(&registry, HookType::PreRunPodSandbox).as_deref(),
        Some("/slow-1.sock")
    );
    assert_eq!(
        endpoint(&registry, HookType::PreCreateContainer).as_deref(),
        Some("/good-1.sock")
    );

    // Both files change; the read of the slow one now never returns.
    let (release, blocker) = std::sync::mpsc::channel::<()>();
    *hang.lock().unwrap() = Some(blocker);
    let reads_before = slow_reads.load(Ordering::SeqCst);
    std::fs::write(
        &slow,
        registration_json("/slow-2.sock", &["PreRunPodSandbox"]),
    )
    .unwrap();
    std::fs::write(
        &good,
        registration_json("/good-2.sock", &["PreCreateContainer"]),
    )
    .unwrap();
    wait_until("the good file's change taken in", || {
        endpoint(&registry, HookType::PreCreateContainer).as_deref() == Some("/good-2.sock")
    })
    .await;
    wait_until("the stuck read counted", || {
        metrics.registration_error_count("timeout") > 0
    })
    .await;
    // The stuck file keeps its registration, and is not read again while
    // its first read runs, though every scan retries the directory.
    assert_eq!(
        endpoint(&registry, HookType::PreRunPodSandbox).as_deref(),
        Some("/slow-1.sock")
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(slow_reads.load(Ordering::SeqCst), reads_before + 1);
    assert_eq!(
        endpoint(&registry, HookType::PreRunPodSandbox).as_deref(),
        Some("/slow-1.sock")
    );

    // Once it returns, the next scan reads the file again.
    drop(release);
    wait_until("the slow file's change taken in", || {
        endpoint(&registry, HookType::PreRunPodSandbox).as_deref() == Some("/slow-2.sock")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_files_keep_the_registrations_as_they_were() {
    let dir = TempDir::new("koord-rp-many").unwrap();
    std::fs::write(
        dir.path().join("koordlet.json"),
        registration_json("/k.sock", &["PreCreateContainer"]),
    )
    .unwrap();
    let metrics = ProxyMetrics::default();
    let options = WatchOptions {
        interval: Duration::from_millis(50),
        max_files: 4,
        ..WatchOptions::default()
    };
    let registry = Registry::watch_with(dir.path().to_path_buf(), options, metrics.clone()).await;
    assert_eq!(
        endpoint(&registry, HookType::PreCreateContainer).as_deref(),
        Some("/k.sock")
    );
    // Files that sort first and would take the stage over, too many of them.
    for index in 0..4 {
        std::fs::write(
            dir.path().join(format!("a{index}.json")),
            registration_json("/intruder.sock", &["PreCreateContainer"]),
        )
        .unwrap();
    }
    wait_until("too many files counted", || {
        metrics.registration_error_count("too_many_files") > 0
    })
    .await;
    assert_eq!(
        endpoint(&registry, HookType::PreCreateContainer).as_deref(),
        Some("/k.sock")
    );
    // Back within the limit, the directory is read again.
    std::fs::remove_file(dir.path().join("a0.json")).unwrap();
    wait_until("the directory read again", || {
        endpoint(&registry, HookType::PreCreateContainer).as_deref() == Some("/intruder.sock")
    })
    .await;
}
