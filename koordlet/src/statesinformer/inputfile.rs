//! Reading the standalone input files (`--pods-file`, `--node-slo-file`)
//! without letting the file wedge koordlet (issue 16).
//!
//! - The file is opened with `O_NONBLOCK` (a FIFO without a writer does not
//!   block the open) and `fstat`ed before anything is read: only a regular
//!   file is read; a FIFO, a device (say a symlink to `/dev/zero`), a socket
//!   or a directory is refused and named. Symlinks to regular files are
//!   followed, as mounted ConfigMaps need.
//! - At most [`MAX_INPUT_FILE_BYTES`] are read; a larger file is refused.
//! - [`InputFile::read`] reads on the blocking pool with a deadline
//!   ([`INPUT_READ_TIMEOUT`]); a read that does not return in time (a hung
//!   network filesystem) is reported, and no second read of the same file
//!   starts while it is still stuck, so blocked threads cannot pile up.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Largest input file read (a pods list of a few thousand pods is well
/// below it).
pub const MAX_INPUT_FILE_BYTES: u64 = 16 << 20;

/// How long one read of an input file may take.
pub const INPUT_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Why an input file was not read. Messages do not repeat the path; the
/// caller's error names it.
#[derive(Debug, thiserror::Error)]
pub enum InputFileError {
    #[error("{0}")]
    Io(#[source] std::io::Error),
    #[error("it is not a regular file but {kind}; refusing to read it")]
    NotRegular { kind: &'static str },
    #[error("it is larger than {max} bytes ({size} bytes)")]
    TooLarge { size: u64, max: u64 },
    #[error("it is not UTF-8 text")]
    NotUtf8,
    #[error("reading it did not finish within {0:?}")]
    TimedOut(Duration),
    #[error("an earlier read is still blocked; not starting another")]
    StillBlocked,
    #[error("the reader stopped: {0}")]
    Task(String),
}

impl InputFileError {
    /// The file is not there (yet): not worth a warning on every poll.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Io(error) if error.kind() == std::io::ErrorKind::NotFound)
    }
}

fn kind_of(file_type: rustix::fs::FileType) -> Option<&'static str> {
    use rustix::fs::FileType;
    match file_type {
        FileType::RegularFile => None,
        FileType::Directory => Some("a directory"),
        FileType::Fifo => Some("a FIFO"),
        FileType::CharacterDevice => Some("a character device"),
        FileType::BlockDevice => Some("a block device"),
        FileType::Socket => Some("a socket"),
        FileType::Symlink => Some("a symlink"),
        FileType::Unknown => Some("an unknown kind of file"),
    }
}

/// Reads `path` when it is a regular file of at most `max` bytes (blocking,
/// but never on a FIFO or a device).
pub fn read_input_file(path: &Path, max: u64) -> Result<String, InputFileError> {
    use rustix::fs::{FileType, Mode, OFlags, fstat, open};
    let fd = open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(|errno| InputFileError::Io(errno.into()))?;
    let stat = fstat(&fd).map_err(|errno| InputFileError::Io(errno.into()))?;
    if let Some(kind) = kind_of(FileType::from_raw_mode(stat.st_mode)) {
        return Err(InputFileError::NotRegular { kind });
    }
    let size = u64::try_from(stat.st_size).unwrap_or(0);
    if size > max {
        return Err(InputFileError::TooLarge { size, max });
    }
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(InputFileError::Io)?;
    let read = bytes.len() as u64;
    if read > max {
        return Err(InputFileError::TooLarge { size: read, max });
    }
    String::from_utf8(bytes).map_err(|_| InputFileError::NotUtf8)
}

/// One input file, read with a deadline and never by two stuck threads.
#[derive(Debug, Clone)]
pub struct InputFile {
    path: PathBuf,
    max: u64,
    timeout: Duration,
    in_flight: Arc<AtomicBool>,
}

impl InputFile {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            max: MAX_INPUT_FILE_BYTES,
            timeout: INPUT_READ_TIMEOUT,
            in_flight: Arc::new(AtomicBool::new(false)),
        }
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the file on the blocking pool and parses it there with
    /// `parse`; waits at most the timeout.
    pub async fn read<T: Send + 'static, E: Send + 'static>(
        &self,
        parse: impl FnOnce(&Path, String) -> Result<T, E> + Send + 'static,
        wrap: impl Fn(InputFileError) -> E,
    ) -> Result<T, E> {
        if self.in_flight.swap(true, Ordering::AcqRel) {
            return Err(wrap(InputFileError::StillBlocked));
        }
        let path = self.path.clone();
        let max = self.max;
        let in_flight = Arc::clone(&self.in_flight);
        let task = tokio::task::spawn_blocking(move || {
            let result = read_input_file(&path, max).map(|text| (path, text));
            in_flight.store(false, Ordering::Release);
            result
        });
        match tokio::time::timeout(self.timeout, task).await {
            Ok(Ok(Ok((path, text)))) => tokio::task::spawn_blocking(move || parse(&path, text))
                .await
                .unwrap_or_else(|error| Err(wrap(InputFileError::Task(error.to_string())))),
            Ok(Ok(Err(error))) => Err(wrap(error)),
            Ok(Err(error)) => {
                self.in_flight.store(false, Ordering::Release);
                Err(wrap(InputFileError::Task(error.to_string())))
            }
            // The blocked thread clears `in_flight` if it ever returns.
            Err(_) => Err(wrap(InputFileError::TimedOut(self.timeout))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use koord_common::testing::TempDir;

    #[test]
    fn only_bounded_regular_files_are_read() {
        let dir = TempDir::new("inputfile").unwrap();
        let file = dir.path().join("f.yaml");
        std::fs::write(&file, "a: 1\n").unwrap();
        assert_eq!(read_input_file(&file, 100).unwrap(), "a: 1\n");
        let link = dir.path().join("link.yaml");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read_input_file(&link, 100).unwrap(), "a: 1\n");
        assert!(matches!(
            read_input_file(&file, 3),
            Err(InputFileError::TooLarge { size: 5, max: 3 })
        ));
        assert!(matches!(
            read_input_file(dir.path(), 100),
            Err(InputFileError::NotRegular {
                kind: "a directory"
            })
        ));
        assert!(matches!(
            read_input_file(Path::new("/dev/null"), 100),
            Err(InputFileError::NotRegular {
                kind: "a character device"
            })
        ));
        std::fs::write(&file, [0xff, 0xfe]).unwrap();
        assert!(matches!(
            read_input_file(&file, 100),
            Err(InputFileError::NotUtf8)
        ));
        let missing = read_input_file(&dir.path().join("missing"), 100).unwrap_err();
        assert!(missing.is_not_found(), "{missing}");
    }

    #[tokio::test]
    async fn reads_parse_off_the_reactor_and_report_errors() {
        let dir = TempDir::new("inputfile-async").unwrap();
        let file = dir.path().join("f.txt");
        std::fs::write(&file, "42").unwrap();
        let input = InputFile::new(&file);
        let parsed: Result<u32, String> = input
            .read(
                |_, text| text.parse::<u32>().map_err(|e| e.to_string()),
                |e| e.to_string(),
            )
            .await;
        assert_eq!(parsed, Ok(42));
        let missing = InputFile::new(dir.path().join("none"));
        let error: Result<(), String> = missing.read(|_, _| Ok(()), |e| e.to_string()).await;
        assert!(error.is_err());
        // The guard is released after every read.
        let again: Result<u32, String> = input
            .read(
                |_, text| text.parse::<u32>().map_err(|e| e.to_string()),
                |e| e.to_string(),
            )
            .await;
        assert_eq!(again, Ok(42));
    }
}
