//! Checksums of whole files, read in the mode chosen per file (so hashing a big file leaves no
//! page cache behind), printed the way the usual tools print them.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;
use sha2::Digest;

use crate::error::{Error, ErrorKind, Result};
use crate::progress::Progress;
use crate::read::Reader;

/// A checksum algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Algo {
    /// SHA-256, as sha256sum prints it.
    Sha256,
    /// BLAKE3 (256-bit), as b3sum prints it.
    Blake3,
    /// XXH3 64-bit, as `xxhsum -H3` prints the digest.
    Xxh3,
}

impl Algo {
    /// The lowercase name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Algo::Sha256 => "sha256",
            Algo::Blake3 => "blake3",
            Algo::Xxh3 => "xxh3",
        }
    }
}

impl fmt::Display for Algo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algo {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Algo, String> {
        match s.to_ascii_lowercase().as_str() {
            "sha256" | "sha-256" => Ok(Algo::Sha256),
            "blake3" | "b3" => Ok(Algo::Blake3),
            "xxh3" | "xxh3_64" => Ok(Algo::Xxh3),
            o => Err(format!("unknown hash algorithm '{o}': expected sha256, blake3 or xxh3")),
        }
    }
}

/// A running checksum.
pub enum Hasher {
    /// SHA-256 state.
    Sha256(sha2::Sha256),
    /// BLAKE3 state.
    Blake3(Box<blake3::Hasher>),
    /// XXH3 state.
    Xxh3(Box<xxhash_rust::xxh3::Xxh3>),
}

impl Hasher {
    /// A fresh state for `algo`.
    pub fn new(algo: Algo) -> Hasher {
        match algo {
            Algo::Sha256 => Hasher::Sha256(sha2::Sha256::new()),
            Algo::Blake3 => Hasher::Blake3(Box::new(blake3::Hasher::new())),
            Algo::Xxh3 => Hasher::Xxh3(Box::default()),
        }
    }

    /// Adds bytes.
    pub fn update(&mut self, d: &[u8]) {
        match self {
            Hasher::Sha256(h) => h.update(d),
            Hasher::Blake3(h) => {
                h.update(d);
            }
            Hasher::Xxh3(h) => h.update(d),
        }
    }

    /// The digest in lowercase hex, as the algorithm's usual tool prints it.
    pub fn hex(self) -> String {
        match self {
            Hasher::Sha256(h) => h.finalize().iter().map(|x| format!("{x:02x}")).collect(),
            Hasher::Blake3(h) => h.finalize().to_hex().to_string(),
            Hasher::Xxh3(h) => format!("{:016x}", h.digest()),
        }
    }
}

impl fmt::Debug for Hasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Hasher::Sha256(_) => "Hasher(sha256)",
            Hasher::Blake3(_) => "Hasher(blake3)",
            Hasher::Xxh3(_) => "Hasher(xxh3)",
        })
    }
}

/// Hashes everything `reader` streams from its current position, counting bytes in
/// `progress` and stopping with an `Interrupted` error when it is cancelled.
pub fn hash_reader(reader: &mut Reader, algo: Algo, progress: &Progress) -> Result<String> {
    let mut h = Hasher::new(algo);
    while let Some(c) = reader.next_chunk()? {
        if progress.is_cancelled() {
            return Err(Error::new(ErrorKind::Interrupted, "hash", reader.path(), "interrupted"));
        }
        h.update(&c);
        progress.add_bytes(c.len() as u64);
    }
    Ok(h.hex())
}
