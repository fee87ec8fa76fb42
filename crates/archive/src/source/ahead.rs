//! Checksums verified ahead of the extraction. A file extracted from a compressed archive takes
//! its name only once every checksum covering its data has passed (see `extract::gate`). Where
//! the archive is one zstd frame, gzip member, xz or bzip2 stream, that checksum is at its very
//! end: every file waits for it, most of them parked under a temporary name once the files held
//! open reach their bound, and all of them are named together at the end, a rename each, with
//! nothing left to overlap.
//!
//! Where the archive is a file, a second read of it can run ahead: a thread that only decodes
//! (no tar parsing, no files), which reaches the end in the time the extraction takes for its
//! first part. Its checksums passing prove the bytes *it* read. The bytes the extraction reads
//! are tied to them by a hash of each piece of the file the engine's reader hands out (its
//! blocks, the same for both reads; XXH3-128, as the checksums themselves guard against
//! corruption, not forgery): once every piece the extraction has decoded so far matches the
//! verifier's, the whole stream counts as verified (`verified` is raised to its decoded length),
//! and from then on each piece the extraction reads is checked against the verifier's before it
//! is decoded. A file changed between the
//! two reads fails that check, and the extraction stops there as at a bad checksum: every file
//! named was made of bytes the checksums passed.
//!
//! It costs a second read of the archive and a second decoding, so it starts only where the
//! hold costs more: once files are being parked, and only where the archive has many files per
//! MiB (see [`Ahead::worth_it`]). Elsewhere the hold goes on as before.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::sync_channel;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::{ChanReader, Compression};

/// What a parked file costs that a file named as soon as it is durable does not: a temporary
/// name's lookup, entry and removal, and a rename, about 16 µs of kernel time (ext4, this
/// project's 2-vCPU machine; docs/BENCHMARKS.md).
const PARKED_US: u64 = 16;

/// About how many µs of CPU decoding one MiB of tar stream costs, for each codec decoded as one
/// stream (measured on the same machine, rounded up).
fn decode_us_per_mib(c: Compression) -> u64 {
    match c {
        Compression::Lz4 => 500,
        Compression::Zstd => 1_000,
        Compression::Gzip => 3_000,
        Compression::Xz => 10_000,
        Compression::Bzip2 => 20_000,
        Compression::None => u64::MAX,
    }
}

/// A piece's hash.
type Digest = u128;

/// What the extraction and the verifier know of each other.
#[derive(Default)]
struct State {
    /// The hash of each piece the extraction's read handed to its decoder, in order, and how
    /// many bytes they held.
    main: Vec<Digest>,
    main_bytes: u64,
    /// The verifier's hashes, once its decoding reached the end with every checksum passed.
    ahead: Option<Vec<Digest>>,
    /// The extraction's pieces so far matched the verifier's: each next one is checked.
    confirmed: bool,
    /// Whether the verifier was started, and how it ended (for the report).
    started: Option<u64>,
    outcome: Option<String>,
    thread: Option<JoinHandle<()>>,
}

/// The verifier of one archive file (see the module's docs).
pub struct Ahead {
    path: PathBuf,
    /// The file the extraction reads (device, inode, length): the second read opens the same
    /// path, and reads only where it still names that file.
    id: Option<(u64, u64, u64)>,
    read: cacheless::ReadOptions,
    /// Set once the compression is known and has its checksum at the end (`None`: the
    /// extraction's read does not hash, nothing starts).
    codec: Mutex<Option<(Compression, Option<u32>)>>,
    verified: Arc<AtomicU64>,
    /// No verifier can run (a plain tar, or the stream ended before it was known): the
    /// extraction's read no longer hashes.
    off: AtomicBool,
    /// The frames a zstd archive decoded frame by frame was found to have so far: where it has
    /// more than one, each is checked as it ends and nothing is started.
    frames: std::sync::OnceLock<Arc<crate::zframes::Stats>>,
    stop: AtomicBool,
    state: Mutex<State>,
}

impl std::fmt::Debug for Ahead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ahead").field("path", &self.path).finish()
    }
}

impl Ahead {
    pub(crate) fn new(path: PathBuf, mut read: cacheless::ReadOptions, verified: Arc<AtomicU64>) -> Arc<Ahead> {
        // Half the extraction's read-ahead: the two reads share its share of the budget.
        read.io.queue_depth = (read.io.queue_depth / 2).max(1);
        use std::os::unix::fs::MetadataExt;
        let id = std::fs::metadata(&path).ok().filter(std::fs::Metadata::is_file).map(|m| (m.dev(), m.ino(), m.len()));
        Arc::new(Ahead {
            path,
            id,
            read,
            codec: Mutex::new(None),
            verified,
            off: AtomicBool::new(false),
            frames: std::sync::OnceLock::new(),
            stop: AtomicBool::new(false),
            state: Mutex::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The archive is `c` decoded as one stream (its checksums in its members): it may be
    /// verified ahead.
    pub(crate) fn enable(&self, c: Compression, window_log_max: Option<u32>) {
        *self.codec.lock().unwrap_or_else(|e| e.into_inner()) = Some((c, window_log_max));
    }

    /// `stats` counts the frames of the zstd archive being decoded frame by frame: the verifier
    /// starts only while it has found one (see [`Ahead::start`]).
    pub(crate) fn watch_frames(&self, stats: Arc<crate::zframes::Stats>) {
        let _ = self.frames.set(stats);
    }

    /// Whether the archive may be verified ahead.
    pub(crate) fn enabled(&self) -> bool {
        !self.is_off() && self.codec.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    /// No verifier will run: the extraction's read stops hashing.
    pub(crate) fn off(&self) {
        self.off.store(true, Ordering::Relaxed);
    }

    /// Whether no verifier will run (the extraction's read hashes until it is known).
    pub(crate) fn is_off(&self) -> bool {
        self.off.load(Ordering::Relaxed)
    }

    /// Whether, `files` files having ended within the first `decoded` bytes of the stream,
    /// a second decoding is worth its cost: where the parked files it would spare save more
    /// CPU than decoding the stream again costs (where the extraction keeps every CPU busy,
    /// as on a machine of 2, that CPU is its time). For zstd, about 63 files per MiB of tar
    /// stream; for xz, 625.
    pub fn worth_it(&self, files: u64, decoded: u64) -> bool {
        let Some((c, _)) = *self.codec.lock().unwrap_or_else(|e| e.into_inner()) else { return false };
        worth_it(c, files, decoded)
    }

    /// Starts the verifier (once; nothing where the archive cannot be verified ahead, or is in
    /// more than one frame: its files then wait only for their own frame's checksum).
    /// `files` files had been kept when it was asked, for the report.
    pub fn start(self: &Arc<Self>, files: u64) {
        let Some((codec, window_log_max)) = *self.codec.lock().unwrap_or_else(|e| e.into_inner()) else { return };
        if self.is_off() || self.frames.get().is_some_and(|s| s.frames.load(Ordering::Relaxed) > 1) {
            return;
        }
        let mut st = self.lock();
        if st.started.is_some() {
            return;
        }
        st.started = Some(files);
        if cacheless::disabled("ahead") {
            st.outcome = Some("turned off (CACHELESS_DISABLE=ahead)".into());
            return;
        }
        let me = self.clone();
        match std::thread::Builder::new().name("cacheless-verify".into()).spawn(move || me.run(codec, window_log_max)) {
            Ok(t) => st.thread = Some(t),
            Err(e) => st.outcome = Some(format!("not started ({e})")),
        }
    }

    /// The verifier: reads the archive again, hashing its pieces, and decodes it to nothing.
    fn run(&self, codec: Compression, window_log_max: Option<u32>) {
        // A decoder fed a hostile stream must not take the verifier down unreported (the
        // extraction's own decoder meets the same bytes and says where they broke).
        let verified = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.verify(codec, window_log_max)))
            .unwrap_or_else(|p| Err(io::Error::other(format!("the decoder failed: {}", crate::error::panic_message(&*p)))));
        let outcome = match verified {
            Ok((hashes, total)) => {
                let mut st = self.lock();
                let matches = st.main.len() <= hashes.len() && st.main.iter().zip(&hashes).all(|(a, b)| a == b);
                st.ahead = Some(hashes);
                if matches {
                    st.confirmed = true;
                    // Under the lock: the extraction's next piece is checked first.
                    self.verified.fetch_max(total, Ordering::AcqRel);
                    "verified the whole archive".to_string()
                } else {
                    "read other bytes than the extraction (the file changed): not used".to_string()
                }
            }
            Err(e) => format!("stopped ({e})"),
        };
        self.lock().outcome = Some(outcome);
    }

    /// Reads and decodes the whole archive; its pieces' hashes and its decoded length where
    /// every checksum passed to its end.
    fn verify(&self, codec: Compression, window_log_max: Option<u32>) -> io::Result<(Vec<Digest>, u64)> {
        use std::os::unix::fs::MetadataExt;
        // Never a FIFO or a device put in the archive's place (its open or its reads could
        // wait for ever): the same regular file, or nothing.
        let now = std::fs::metadata(&self.path).ok().filter(std::fs::Metadata::is_file).map(|m| (m.dev(), m.ino(), m.len()));
        if now.is_none() || now != self.id {
            return Err(io::Error::other("its path no longer names the file the extraction reads"));
        }
        let mut reader = cacheless::Reader::open(&self.path, &self.read).map_err(io::Error::other)?;
        let (tx, rx) = sync_channel::<io::Result<Vec<u8>>>(2);
        let stop = &self.stop;
        std::thread::scope(|s| {
            let hashing = std::thread::Builder::new().name("cacheless-verify".into()).spawn_scoped(s, move || {
                let mut hashes = Vec::new();
                loop {
                    if stop.load(Ordering::Relaxed) {
                        return Err(io::Error::new(io::ErrorKind::Interrupted, "the extraction ended first"));
                    }
                    let chunk = match reader.next_chunk() {
                        Ok(Some(c)) => c,
                        Ok(None) => break,
                        Err(e) => {
                            let e = io::Error::other(e.to_string());
                            let _ = tx.send(Err(io::Error::new(e.kind(), e.to_string())));
                            return Err(e);
                        }
                    };
                    hashes.push(digest(&chunk));
                    let v = chunk.to_vec();
                    drop(chunk);
                    if tx.send(Ok(v)).is_err() {
                        return Err(io::Error::other("the decoder stopped"));
                    }
                }
                Ok(hashes)
            })?;
            let mine = Arc::new(AtomicU64::new(0));
            // The decoder (and the channel's end) goes at the end of this statement: a read
            // still sending learns that it stopped.
            let decoded = io::copy(&mut super::decoder(codec, ChanReader::new(rx), mine.clone(), window_log_max), &mut io::sink());
            let hashes = hashing.join().map_err(|_| io::Error::other("the verifier's read panicked"))?;
            let total = decoded?;
            let hashes = hashes?;
            // Every member ended with its checks passed: the whole decoded length is verified.
            if mine.load(Ordering::Acquire) != total {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "the stream did not end at a member's end"));
            }
            Ok((hashes, total))
        })
    }

    /// For the extraction's read, before it hands `piece` (its next one) to its decoder: an
    /// error where the verifier vouched for the stream and `piece` is not what it read there.
    /// Nothing where no verifier will run.
    pub(crate) fn check(&self, piece: &[u8]) -> io::Result<()> {
        if self.is_off() {
            return Ok(());
        }
        let d = digest(piece);
        let mut st = self.lock();
        let at = st.main.len();
        if st.confirmed && st.ahead.as_ref().and_then(|a| a.get(at)) != Some(&d) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: the archive changed while it was read (its {} bytes at offset {} differ from those whose checksums passed)",
                    self.path.display(),
                    piece.len(),
                    st.main_bytes
                ),
            ));
        }
        st.main.push(d);
        st.main_bytes += piece.len() as u64;
        Ok(())
    }

    /// What the verifier did, in words for the report; `None` where it never started.
    pub fn report(&self) -> Option<String> {
        let st = self.lock();
        let files = st.started?;
        let how = st.outcome.clone().unwrap_or_else(|| "still running at the end".into());
        Some(format!("checksums verified ahead by a second read, started after {files} files: {how}"))
    }

    /// Waits for the verifier to end by itself (tests).
    #[cfg(test)]
    fn wait(&self) {
        let t = self.lock().thread.take();
        if let Some(t) = t {
            let _ = t.join();
        }
    }

    /// Stops the verifier and waits for it.
    pub(crate) fn finish(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let t = self.lock().thread.take();
        if let Some(t) = t {
            let _ = t.join();
        }
    }
}

/// [`Ahead::worth_it`] for a stream compressed as `c`.
fn worth_it(c: Compression, files: u64, decoded: u64) -> bool {
    let saved = u128::from(files) * u128::from(PARKED_US);
    let cost = u128::from(decode_us_per_mib(c)) * u128::from(decoded.max(1)) / (1 << 20);
    saved >= cost
}

/// XXH3-128 of a piece.
fn digest(b: &[u8]) -> Digest {
    xxhash_rust::xxh3::xxh3_128(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The verifier vouches for the stream only where the pieces the extraction read so far
    /// are those it read, and from then on a piece that differs (the file changed between
    /// the two reads) is refused before it is decoded; where the extraction read other bytes
    /// before, nothing is vouched for.
    #[test]
    fn the_verifier_vouches_only_for_the_bytes_it_read() {
        let d = tempfile::tempdir().unwrap();
        let plain: Vec<u8> = (0..(3 << 20)).map(|i| u8::try_from(i * 31 % 253).unwrap()).collect();
        let z = zstd::encode_all(&plain[..], 1).unwrap();
        let path = d.path().join("a.zst");
        std::fs::write(&path, &z).unwrap();
        let ro = cacheless::ReadOptions::from(cacheless::IoOptions::default());
        // The engine reads a file this small in one piece.
        let segs: Vec<&[u8]> = vec![&z[..]];
        for same_so_far in [true, false] {
            let verified = Arc::new(AtomicU64::new(0));
            let a = Ahead::new(path.clone(), ro.clone(), verified.clone());
            a.enable(Compression::Zstd, None);
            let first = if same_so_far { segs[0].to_vec() } else { vec![0u8; segs[0].len()] };
            a.check(&first).unwrap();
            a.start(1);
            a.wait();
            if same_so_far {
                assert_eq!(verified.load(Ordering::Acquire), plain.len() as u64, "{}", a.report().unwrap_or_default());
                assert!(a.report().unwrap_or_default().contains("verified the whole archive"));
                let e = a.check(b"other bytes").unwrap_err();
                assert!(e.to_string().contains("changed while it was read"), "{e}");
            } else {
                assert_eq!(verified.load(Ordering::Acquire), 0, "nothing vouched for");
                assert!(a.report().unwrap_or_default().contains("not used"), "{:?}", a.report());
                a.check(b"other bytes").unwrap();
            }
            a.finish();
        }
    }

    /// The second read opens the archive's path again: where it no longer names the file the
    /// extraction reads (replaced, or a FIFO put there), it reads nothing and vouches for nothing.
    #[test]
    fn the_verifier_reads_only_the_file_the_extraction_reads() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("a.zst");
        let z = zstd::encode_all(&b"tar bytes"[..], 1).unwrap();
        std::fs::write(&path, &z).unwrap();
        let ro = cacheless::ReadOptions::from(cacheless::IoOptions::default());
        for replace in ["file", "fifo"] {
            let verified = Arc::new(AtomicU64::new(0));
            let a = Ahead::new(path.clone(), ro.clone(), verified.clone());
            a.enable(Compression::Zstd, None);
            a.check(&z).unwrap();
            if replace == "file" {
                // Another file of the same bytes (made while the first still exists, so that its
                // inode is another).
                std::fs::write(d.path().join("other"), &z).unwrap();
                std::fs::rename(d.path().join("other"), &path).unwrap();
            } else {
                std::fs::remove_file(&path).unwrap();
                assert!(std::process::Command::new("mkfifo").arg(&path).status().unwrap().success());
            }
            a.start(1);
            a.wait();
            assert_eq!(verified.load(Ordering::Acquire), 0, "{replace}");
            assert!(a.report().unwrap_or_default().contains("no longer names"), "{replace}: {:?}", a.report());
            std::fs::remove_file(&path).unwrap();
            std::fs::write(&path, &z).unwrap();
        }
    }

    #[test]
    fn worth_it_where_files_are_many_per_mib() {
        // 200,000 files in 0.86 GiB: yes, but not in xz (decoding it twice costs more); 24,000
        // in 1.88 GiB: no; a kernel's source tree (78,579 files, 1.23 GiB): no (measured: the
        // second decoding cost 1.0 s of CPU, the renames it spared 0.8 s).
        for c in [Compression::Lz4, Compression::Zstd, Compression::Gzip] {
            assert!(worth_it(c, 200_000, 880 << 20), "{c:?}");
            assert!(!worth_it(c, 24_000, 1925 << 20), "{c:?}");
            assert!(worth_it(c, 1, 0), "{c:?}");
        }
        assert!(!worth_it(Compression::Xz, 200_000, 880 << 20));
        assert!(!worth_it(Compression::Zstd, 78_579, 1262 << 20));
        assert!(!worth_it(Compression::Xz, 78_579, 1330 << 20));
        assert!(!worth_it(Compression::None, 1_000_000, 1 << 20));
    }
}
