//! Device state in a directory: the emulated sensor's "flash" (key, sequence, pairing). Each write goes to a temporary
//! file that is synced and renamed over the old one, so a crash leaves either the old or the
//! new value, never a torn one.

use anyhow::{Context, Result};
use sigil_crypto::{SecretKey, SignatureAlgorithm};
use sigil_device::pairing::{decode_record, encode_record};
use sigil_device::{DeviceStorage, Pairing, PairingStorage};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

pub struct FileStorage {
    dir: PathBuf,
}

impl FileStorage {
    pub fn open(dir: &Path) -> Result<Self> {
        create_private_dir(dir)?;
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }

    /// The key already stored in `dir`, read without creating anything (None: no
    /// directory or no key yet).
    pub fn existing_key(dir: &Path) -> Result<Option<SecretKey>> {
        if !dir.is_dir() {
            return Ok(None);
        }
        Self {
            dir: dir.to_path_buf(),
        }
        .load_key()
        .map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// The pairing already stored in `dir`, read without creating anything.
    pub fn existing_pairing(dir: &Path) -> Result<Option<Pairing>> {
        if !dir.is_dir() {
            return Ok(None);
        }
        Self {
            dir: dir.to_path_buf(),
        }
        .load_pairing()
        .map_err(|e| anyhow::anyhow!("{e}"))
    }

    fn write_atomic(&self, name: &str, data: &[u8]) -> std::io::Result<()> {
        let tmp = self.dir.join(format!(".{name}.tmp"));
        {
            let mut f = create_private_file(&tmp)?;
            f.write_all(data)?;
            f.sync_all()?;
        }
        fs::rename(&tmp, self.dir.join(name))?;
        fs::File::open(&self.dir)?.sync_all()
    }

    fn read(&self, name: &str) -> std::io::Result<Option<String>> {
        match fs::read_to_string(self.dir.join(name)) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// Creates `dir` (and its parents) if missing, the directory itself readable by its owner
/// only (0700): it holds the device's private key.
pub fn create_private_dir(dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut b = fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(dir)
        .with_context(|| format!("cannot create state directory {}", dir.display()))
}

/// Creates (or truncates) `path` readable and writable by its owner only (0600).
pub fn create_private_file(path: &Path) -> std::io::Result<fs::File> {
    let mut o = fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    let f = o.open(path)?;
    #[cfg(unix)]
    {
        // An older file keeps its mode through `open`: set it.
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(fs::Permissions::from_mode(0o600))?;
    }
    Ok(f)
}

/// The advisory lock on a state directory (`DIR/lock`, `flock`), held while this value
/// lives: two processes on one directory would both write its sequence reservation and both
/// seal records under its kept DTLS association, reusing nonces.
pub struct StateLock {
    _file: fs::File,
}

impl StateLock {
    /// Takes the lock on `dir` (created 0700 if missing), or says which process holds it.
    pub fn take(dir: &Path) -> Result<Self> {
        use std::io::{Read, Seek};
        create_private_dir(dir)?;
        let path = dir.join("lock");
        let mut o = fs::OpenOptions::new();
        o.read(true).write(true).create(true).truncate(false);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
        let mut file = o
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        #[cfg(unix)]
        {
            use std::os::fd::AsRawFd;
            // SAFETY: flock on a descriptor this function owns; no memory is passed.
            let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if r != 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::WouldBlock {
                    let mut text = String::new();
                    let _ = file.read_to_string(&mut text);
                    let pid = text.trim();
                    let pid = if pid.is_empty() { "unknown" } else { pid };
                    anyhow::bail!(
                        "state directory {} is in use by another process (pid {pid})",
                        dir.display()
                    );
                }
                return Err(e).with_context(|| format!("cannot lock {}", path.display()));
            }
        }
        file.set_len(0)?;
        file.rewind()?;
        file.write_all(format!("{}\n", std::process::id()).as_bytes())?;
        Ok(Self { _file: file })
    }
}

#[derive(Debug)]
pub enum StorageError {
    Io(std::io::Error),
    Corrupt(&'static str),
}

impl std::fmt::Display for StorageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io(e) => write!(f, "state directory: {e}"),
            Self::Corrupt(what) => write!(f, "state directory: corrupt {what} file"),
        }
    }
}

impl std::error::Error for StorageError {}

impl From<std::io::Error> for StorageError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

impl DeviceStorage for FileStorage {
    type Error = StorageError;

    fn load_key(&mut self) -> Result<Option<SecretKey>, StorageError> {
        let Some(text) = self.read("key")? else {
            return Ok(None);
        };
        let mut lines = text.lines();
        let alg = lines
            .next()
            .and_then(SignatureAlgorithm::from_name)
            .ok_or(StorageError::Corrupt("key"))?;
        let bytes = lines
            .next()
            .and_then(|h| hex::decode(h.trim()).ok())
            .ok_or(StorageError::Corrupt("key"))?;
        SecretKey::from_bytes(alg, &bytes)
            .map(Some)
            .map_err(|_| StorageError::Corrupt("key"))
    }

    fn store_key(&mut self, key: &SecretKey) -> Result<(), StorageError> {
        let text = format!(
            "{}\n{}\n",
            key.algorithm().name(),
            hex::encode(key.to_bytes())
        );
        Ok(self.write_atomic("key", text.as_bytes())?)
    }

    fn load_reservation(&mut self) -> Result<Option<u64>, StorageError> {
        match self.read("sequence")? {
            None => Ok(None),
            Some(t) => t
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| StorageError::Corrupt("sequence")),
        }
    }

    fn store_reservation(&mut self, v: u64) -> Result<(), StorageError> {
        Ok(self.write_atomic("sequence", format!("{v}\n").as_bytes())?)
    }

    fn erase(&mut self) -> Result<(), StorageError> {
        for name in ["key", "sequence", "pairing"] {
            match fs::remove_file(self.dir.join(name)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

impl PairingStorage for FileStorage {
    /// The record of `sigil_device::pairing::encode_record`, in hex, in `pairing`: written
    /// once, atomically, like the other files.
    fn load_pairing(&mut self) -> Result<Option<Pairing>, StorageError> {
        let Some(text) = self.read("pairing")? else {
            return Ok(None);
        };
        hex::decode(text.trim())
            .ok()
            .and_then(|r| decode_record(&r))
            .map(Some)
            .ok_or(StorageError::Corrupt("pairing"))
    }

    fn store_pairing(&mut self, pairing: &Pairing) -> Result<(), StorageError> {
        let text = format!("{}\n", hex::encode(encode_record(pairing)));
        Ok(self.write_atomic("pairing", text.as_bytes())?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_reservations_survive_reopen_and_erase() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = FileStorage::open(dir.path()).unwrap();
        assert!(s.load_key().unwrap().is_none());
        let k = SecretKey::from_bytes(SignatureAlgorithm::EcdsaP256, &[7; 32]).unwrap();
        s.store_key(&k).unwrap();
        s.store_reservation(65).unwrap();
        let mut s2 = FileStorage::open(dir.path()).unwrap();
        assert_eq!(s2.load_key().unwrap().unwrap().to_bytes(), [7; 32]);
        assert_eq!(s2.load_reservation().unwrap(), Some(65));
        std::fs::write(dir.path().join("sequence"), "x").unwrap();
        assert!(matches!(
            s2.load_reservation(),
            Err(StorageError::Corrupt(_))
        ));
        s2.erase().unwrap();
        assert!(s2.load_key().unwrap().is_none());
        assert!(s2.load_reservation().unwrap().is_none());
    }

    #[cfg(unix)]
    #[test]
    fn state_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("state");
        let mut s = FileStorage::open(&dir).unwrap();
        s.store_reservation(1).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("sequence")), 0o600);
    }

    #[test]
    fn a_second_lock_names_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let held = StateLock::take(dir.path()).unwrap();
        // flock locks belong to the open file description: a second open is refused even
        // within one process.
        let e = StateLock::take(dir.path()).err().unwrap().to_string();
        assert!(
            e.contains("is in use by another process")
                && e.contains(&format!("(pid {})", std::process::id())),
            "{e}"
        );
        drop(held);
        StateLock::take(dir.path()).unwrap();
    }
}
