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
        fs::create_dir_all(dir)
            .with_context(|| format!("cannot create state directory {}", dir.display()))?;
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
            let mut f = fs::File::create(&tmp)?;
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                f.set_permissions(fs::Permissions::from_mode(0o600))?;
            }
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
}
