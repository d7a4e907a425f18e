//! Reading the files a configuration names: the config file itself, the shared key, the
//! rank table, the receiver's secrets, the web config and its certificates.
//!
//! Every such read goes through [`read_regular`], because a path in a config file is
//! input like any other. A path that names a FIFO would block `open(2)` forever, a device
//! could stream without end, and a file on a hung network mount blocks in the kernel where
//! no flag helps. So the file is opened with `O_NONBLOCK` (a FIFO opens at once instead of
//! waiting for a writer), must be a regular file (checked on the open descriptor, so a
//! swap after the check changes nothing), must fit the caller's size limit, and the whole
//! read runs on a helper thread that the caller waits for only until a deadline: a hung
//! mount costs one parked thread, never the caller.

use std::io::Read as _;
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Largest config file (TOML): far above any real one.
pub const CONFIG_LIMIT: u64 = 1 << 20;
/// Largest shared-key file.
pub const KEY_LIMIT: u64 = 4096;
/// Largest rank table: a 100,000-rank v1.0 table is about 12 MB.
pub const RANK_TABLE_LIMIT: u64 = 32 << 20;
/// Largest secret file (a token or password).
pub const SECRET_LIMIT: u64 = 64 << 10;
/// Largest web config file (YAML) or PEM file (certificate chain, key, CA bundle).
pub const WEB_LIMIT: u64 = 1 << 20;
/// How long a read may take before the caller gives up on it.
pub const READ_DEADLINE: Duration = Duration::from_secs(5);
/// Shortest accepted shared key, in bytes.
pub const KEY_MIN_BYTES: usize = 16;

/// Why a file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// `open(2)` failed.
    #[error("cannot open {path}: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Not a regular file: a FIFO, socket, device or directory.
    #[error("{path} is a {kind}, not a regular file")]
    NotRegular {
        /// The file.
        path: PathBuf,
        /// What it is instead.
        kind: &'static str,
    },
    /// Larger than the caller's limit.
    #[error("{path} is larger than {limit} bytes, the limit for this file")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit.
        limit: u64,
    },
    /// `read(2)` failed.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The read did not finish in time (a hung mount); a thread is left parked on it.
    #[error("reading {path} did not finish within {deadline:?}; is it on a hung mount?")]
    Timeout {
        /// The file.
        path: PathBuf,
        /// The deadline.
        deadline: Duration,
    },
    /// The bytes are not UTF-8 where text is expected.
    #[error("{path} is not UTF-8 text")]
    NotText {
        /// The file.
        path: PathBuf,
    },
}

/// A file's bytes with the permission bits it had when read.
#[derive(Debug, Clone)]
pub struct Contents {
    /// The bytes.
    pub bytes: Vec<u8>,
    /// `st_mode & 0o7777`.
    pub mode: u32,
}

fn kind_of(t: std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "directory"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_socket() {
        "socket"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else {
        "special file"
    }
}

/// The read itself, on whatever thread runs it.
fn read_now(path: &Path, limit: u64) -> Result<Contents, FileError> {
    let open = |source| FileError::Open {
        path: path.to_path_buf(),
        source,
    };
    let read = |source| FileError::Read {
        path: path.to_path_buf(),
        source,
    };
    // O_NONBLOCK: a FIFO opens at once (instead of waiting for a writer) and is then
    // refused below; for a regular file the flag changes nothing. O_NOCTTY: a terminal
    // named here must not become the controlling terminal.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(open)?;
    let meta = file.metadata().map_err(read)?;
    if !meta.file_type().is_file() {
        return Err(FileError::NotRegular {
            path: path.to_path_buf(),
            kind: kind_of(meta.file_type()),
        });
    }
    let too_large = || FileError::TooLarge {
        path: path.to_path_buf(),
        limit,
    };
    if meta.len() > limit {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // One byte past the limit tells a file that grew since fstat from one that fits.
    file.take(limit + 1).read_to_end(&mut bytes).map_err(read)?;
    if bytes.len() as u64 > limit {
        return Err(too_large());
    }
    Ok(Contents {
        bytes,
        mode: meta.mode() & 0o7777,
    })
}

/// Reads a regular file of at most `limit` bytes, giving up after [`READ_DEADLINE`].
pub fn read_regular(path: &Path, limit: u64) -> Result<Contents, FileError> {
    read_regular_within(path, limit, READ_DEADLINE)
}

/// [`read_regular`] with an explicit deadline.
pub fn read_regular_within(
    path: &Path,
    limit: u64,
    deadline: Duration,
) -> Result<Contents, FileError> {
    let owned = path.to_path_buf();
    with_deadline(path, deadline, move || read_now(&owned, limit))
}

/// Runs `read` on a helper thread and waits for it at most `deadline`; past it the
/// thread is left to finish (or hang) on its own.
fn with_deadline<T: Send + 'static>(
    path: &Path,
    deadline: Duration,
    read: impl FnOnce() -> Result<T, FileError> + Send + 'static,
) -> Result<T, FileError> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("hcclwatch-read".into())
        .spawn(move || {
            let _ = tx.send(read());
        })
        .map_err(|source| FileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    rx.recv_timeout(deadline).unwrap_or_else(|_| {
        Err(FileError::Timeout {
            path: path.to_path_buf(),
            deadline,
        })
    })
}

/// [`read_regular`] for UTF-8 text.
pub fn read_text(path: &Path, limit: u64) -> Result<String, FileError> {
    let c = read_regular(path, limit)?;
    String::from_utf8(c.bytes).map_err(|_| FileError::NotText {
        path: path.to_path_buf(),
    })
}

/// Why a secret (the shared key, a token, a password) is not usable.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The file could not be read.
    #[error(transparent)]
    File(#[from] FileError),
    /// Nothing but whitespace.
    #[error("{path} is empty")]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// Whitespace between the first and last non-blank byte: the secret must be one token.
    #[error(
        "{path} has whitespace inside the secret (byte {offset}); it must be one token (surrounding whitespace and the final newline are trimmed)"
    )]
    InnerWhitespace {
        /// The file.
        path: PathBuf,
        /// Offset of the first inner whitespace byte, within the trimmed secret.
        offset: usize,
    },
    /// Shorter than required.
    #[error("{path} holds {len} bytes; at least {min} are required")]
    Short {
        /// The file.
        path: PathBuf,
        /// Bytes after trimming.
        len: usize,
        /// The minimum.
        min: usize,
    },
}

/// A secret read from a file.
#[derive(Clone)]
pub struct Secret {
    /// The secret, trimmed.
    pub bytes: Vec<u8>,
    /// Whether any user may read the file (`o+r`): worth a warning, not a refusal, since
    /// container runtimes often mount secrets that way.
    pub world_readable: bool,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secret")
            .field("len", &self.bytes.len())
            .field("world_readable", &self.world_readable)
            .finish()
    }
}

/// Trims surrounding ASCII whitespace and refuses inner whitespace and short secrets.
pub fn parse_secret(path: &Path, raw: &[u8], min: usize) -> Result<Vec<u8>, SecretError> {
    let start = raw.iter().position(|b| !b.is_ascii_whitespace());
    let Some(start) = start else {
        return Err(SecretError::Empty {
            path: path.to_path_buf(),
        });
    };
    let end = raw
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    let secret = &raw[start..end];
    if let Some(offset) = secret.iter().position(u8::is_ascii_whitespace) {
        return Err(SecretError::InnerWhitespace {
            path: path.to_path_buf(),
            offset,
        });
    }
    if secret.len() < min {
        return Err(SecretError::Short {
            path: path.to_path_buf(),
            len: secret.len(),
            min,
        });
    }
    Ok(secret.to_vec())
}

/// Reads a secret file: a regular file of at most [`SECRET_LIMIT`] bytes (the shared key:
/// [`KEY_LIMIT`]), trimmed, one token of at least `min` bytes.
pub fn read_secret(path: &Path, limit: u64, min: usize) -> Result<Secret, SecretError> {
    let c = read_regular(path, limit)?;
    Ok(Secret {
        bytes: parse_secret(path, &c.bytes, min)?,
        world_readable: c.mode & 0o004 != 0,
    })
}

/// Reads the shared collective key (`collective.key_file`).
pub fn read_key(path: &Path) -> Result<Secret, SecretError> {
    read_secret(path, KEY_LIMIT, KEY_MIN_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;
    use std::time::Instant;

    /// Pins: a FIFO is refused at once instead of blocking `open(2)` until a writer comes
    /// (`std::fs::read` on it never returns).
    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let ok = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(ok.success());
        let t = Instant::now();
        let e = read_regular(&fifo, 1024).unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        assert!(
            matches!(e, FileError::NotRegular { kind: "FIFO", .. }),
            "{e}"
        );
        let e = read_regular(dir.path(), 1024).unwrap_err();
        assert!(e.to_string().contains("is a directory"), "{e}");
        let e = read_regular(Path::new("/dev/zero"), 1024).unwrap_err();
        assert!(e.to_string().contains("character device"), "{e}");
    }

    /// Pins: a file over the caller's limit is refused before it is read whole.
    #[test]
    fn size_limit() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![b'x'; 101]).unwrap();
        assert!(matches!(
            read_regular(&p, 100).unwrap_err(),
            FileError::TooLarge { limit: 100, .. }
        ));
        assert_eq!(read_regular(&p, 101).unwrap().bytes.len(), 101);
    }

    /// Pins: the deadline holds even when the read itself never finishes (a hung mount).
    #[test]
    fn the_deadline_bounds_the_wait() {
        let (_keep, never) = std::sync::mpsc::channel::<()>();
        let t = Instant::now();
        let e = with_deadline(Path::new("/hung"), Duration::from_millis(200), move || {
            let _ = never.recv();
            Ok(())
        })
        .unwrap_err();
        assert!(matches!(e, FileError::Timeout { .. }), "{e}");
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    }

    /// Pins: surrounding whitespace is trimmed, inner whitespace is an error (it used to be
    /// dropped silently, turning "abc def" into the key "abcdef"), short keys are refused,
    /// and a world-readable file is reported.
    #[test]
    fn secrets_are_one_trimmed_token() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("key");
        std::fs::write(&p, "  0123456789abcdef0123\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let k = read_key(&p).unwrap();
        assert_eq!(k.bytes, b"0123456789abcdef0123");
        assert!(!k.world_readable);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(read_key(&p).unwrap().world_readable);

        std::fs::write(&p, "01234567 89abcdef0123\n").unwrap();
        let e = read_key(&p).unwrap_err();
        assert!(
            matches!(e, SecretError::InnerWhitespace { offset: 8, .. }),
            "{e}"
        );
        std::fs::write(&p, "short\n").unwrap();
        assert!(matches!(
            read_key(&p).unwrap_err(),
            SecretError::Short { len: 5, .. }
        ));
        std::fs::write(&p, " \n\t").unwrap();
        assert!(matches!(
            read_key(&p).unwrap_err(),
            SecretError::Empty { .. }
        ));
    }
}
