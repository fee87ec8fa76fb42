//! Loading: a whole file, or only the tensors asked for, into one arena.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cacheless::conv::{fit, usize_of};
use cacheless::{BackendChoice, Decision, Progress};
use serde::Serialize;

use crate::arena::{Arena, ArenaOptions, SpanReader};
use crate::error::{Error, Result};
use crate::header::{Header, TensorEntry, PREFIX, PREFIX_LEN};

/// How to load; the same knobs as reading any file into an arena.
pub type LoadOptions = ArenaOptions;

/// The first read of a whole-file load: the header of nearly every file fits in it, so the
/// header is checked before the rest of the file is read.
pub const FIRST_READ: u64 = 1 << 20;

/// Reads of at most this many bytes through [`SafeFile`] fetch this much from their offset on,
/// so that the next tensors in the file come from memory.
pub const WINDOW: u64 = 4 << 20;

/// What a load did.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    /// The file.
    #[serde(serialize_with = "cacheless::quote::serialize_path")]
    pub path: PathBuf,
    /// Its length.
    pub file_len: u64,
    /// Bytes read into the arena.
    pub bytes_read: u64,
    /// How it was read, and why.
    pub decision: Decision,
    /// The backend, if requests were queued.
    pub backend: Option<BackendChoice>,
}

/// A loaded file: its header and the arena holding its tensors.
#[derive(Debug)]
pub struct Loaded {
    /// The validated header.
    pub header: Header,
    /// The bytes.
    pub arena: Arena,
    /// How they were read.
    pub report: LoadReport,
}

impl Loaded {
    /// Arena offset of a tensor's first byte, if the tensor was loaded.
    pub fn tensor_offset(&self, t: &TensorEntry) -> Option<usize> {
        self.arena.locate(t.offset, t.len)
    }
    /// A tensor's bytes, if it was loaded.
    pub fn tensor_bytes(&self, t: &TensorEntry) -> Option<&[u8]> {
        self.tensor_offset(t).map(|at| &self.arena.bytes()[at..at + usize_of(t.len)])
    }
}

/// Reads and validates the header with small reads (the data is not touched).
fn read_header(sr: &mut SpanReader) -> Result<Header> {
    let len = sr.len();
    let path = sr.path().to_path_buf();
    let mut first = vec![0u8; fit(len, 64 << 10)];
    let n = sr.read_at(&mut first, 0)?;
    first.truncate(n);
    let start = Header::data_start(&path, len, &first)?;
    if usize_of(start) <= first.len() {
        return Header::parse(&path, len, &first[PREFIX_LEN..usize_of(start)]);
    }
    let mut json = vec![0u8; usize_of(start - PREFIX)];
    let n = sr.read_at(&mut json, PREFIX)?;
    if n < json.len() {
        return Err(Error::invalid(&path, "file shrank while its header was being read"));
    }
    Header::parse(&path, len, &json)
}

/// Loads `path`: every tensor, or only those named in `keys` (then only their byte spans are
/// read). A `path` written as an `s3://` or `http(s)://` URL is fetched: the header first,
/// then the spans as ranged GETs in parallel straight into the arena. The header is validated
/// before any data is read; `progress` counts bytes and cancels.
pub fn load(path: &Path, keys: Option<&[String]>, opts: &LoadOptions, progress: &Progress) -> Result<Loaded> {
    load_counted(path, keys, opts, progress, true)
}

fn load_counted(path: &Path, keys: Option<&[String]>, opts: &LoadOptions, progress: &Progress, count_total: bool) -> Result<Loaded> {
    load_from(SpanReader::open(path, opts)?, keys, progress, count_total)
}

/// [`load`] from a reader already open (a shard of a model).
pub(crate) fn load_from(mut sr: SpanReader, keys: Option<&[String]>, progress: &Progress, count_total: bool) -> Result<Loaded> {
    let path = &sr.path().to_path_buf();
    let len = sr.len();
    let (header, arena, bytes_read) = match keys {
        None => {
            if count_total {
                progress.add_total_bytes(len);
            }
            let mut arena = sr.layout(&[(0, len)])?;
            let done = sr.fill(&mut arena, 0, FIRST_READ.min(len), progress)?;
            let head = &arena.bytes()[..usize_of(len)];
            let start = Header::data_start(path, len, head)?;
            let done = if start > done { sr.fill(&mut arena, done, start, progress)? } else { done };
            let header = Header::parse(path, len, &arena.bytes()[PREFIX_LEN..usize_of(start)])?;
            sr.fill(&mut arena, done, len, progress)?;
            (header, arena, len)
        }
        Some(keys) => {
            let header = read_header(&mut sr)?;
            let mut spans = Vec::with_capacity(keys.len());
            for k in keys {
                let t = header.require(k)?;
                spans.push((t.offset, t.end()));
            }
            let mut arena = sr.layout(&spans)?;
            let bytes = arena.segments().iter().map(|s| (s.len as u64).min(len - s.file)).sum();
            if count_total {
                progress.add_total_bytes(bytes);
            }
            sr.fill(&mut arena, 0, len, progress)?;
            (header, arena, bytes)
        }
    };
    let report = LoadReport { path: path.to_path_buf(), file_len: len, bytes_read, decision: sr.decision().clone(), backend: sr.backend().cloned() };
    Ok(Loaded { header, arena, report })
}

/// A file opened for reading tensors one at a time (what `safe_open` is built on): the
/// header is read at open; each tensor is read when asked for, together with the tensors that
/// follow it up to [`WINDOW`] bytes, so that walking a file of many small tensors takes few
/// requests.
#[derive(Debug)]
pub struct SafeFile {
    sr: SpanReader,
    header: Header,
    window: Option<Arc<Arena>>,
}

impl SafeFile {
    /// Opens `path` and reads its header.
    pub fn open(path: &Path, opts: &LoadOptions) -> Result<SafeFile> {
        let mut sr = SpanReader::open(path, opts)?;
        let header = read_header(&mut sr)?;
        Ok(SafeFile { sr, header, window: None })
    }

    /// The validated header.
    pub fn header(&self) -> &Header {
        &self.header
    }
    /// How the file is read, and why.
    pub fn decision(&self) -> &Decision {
        self.sr.decision()
    }

    /// An arena holding file bytes `[off, off+len)` and their offset in it.
    pub fn span(&mut self, off: u64, len: u64, progress: &Progress) -> Result<(Arc<Arena>, usize)> {
        if let Some(w) = &self.window {
            if let Some(at) = w.locate(off, len) {
                return Ok((w.clone(), at));
            }
        }
        let end = off
            .checked_add(len)
            .filter(|&e| e <= self.header.file_len())
            .ok_or_else(|| Error::invalid(self.header.path(), format!("range {off}+{len} is outside the file")))?;
        let hi = if len <= WINDOW { end.max(off.saturating_add(WINDOW).min(self.header.file_len())) } else { end };
        let mut arena = self.sr.layout(&[(off, hi)])?;
        let total = arena.segments().iter().map(|s| (s.len as u64).min(self.sr.len() - s.file)).sum();
        progress.add_total_bytes(total);
        self.sr.fill(&mut arena, off, hi, progress)?;
        let arena = Arc::new(arena);
        let at = arena.locate(off, len).ok_or_else(|| Error::invalid(self.header.path(), "internal error: a read range is missing from its arena"))?;
        if len <= WINDOW {
            self.window = Some(arena.clone());
        }
        Ok((arena, at))
    }

    /// The arena holding tensor `name` and the tensor's offset in it.
    pub fn tensor(&mut self, name: &str, progress: &Progress) -> Result<(Arc<Arena>, usize, TensorEntry)> {
        let t = self.header.require(name)?.clone();
        let (arena, at) = self.span(t.offset, t.len, progress)?;
        Ok((arena, at, t))
    }
}
