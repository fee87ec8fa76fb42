//! Copying one file: direct reads handed to the writer in the same aligned buffers, no copy.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, ErrorKind, Result};
use crate::policy::Decision;
use crate::progress::Progress;
use crate::read::{ReadOptions, Reader};
use crate::write::{WriteOptions, WriteReport, Writer};
use crate::BackendChoice;

/// What a copy did.
#[derive(Debug, Clone, Serialize)]
pub struct CopyReport {
    /// Source path.
    pub src: PathBuf,
    /// How the source was read.
    pub read: Decision,
    /// The read backend, if a queue was used.
    pub read_backend: Option<BackendChoice>,
    /// What the write did.
    pub write: WriteReport,
}

/// Copies the regular file `src` to `dst`: written under a temporary name, made durable (per
/// `wo.sync`), then renamed over `dst`. Refuses to copy a file onto itself. Checks
/// `progress` for cancellation between requests; an interrupted copy leaves `dst` untouched.
pub fn copy_file(src: &Path, dst: &Path, ro: &ReadOptions, wo: &WriteOptions, progress: &Progress) -> Result<CopyReport> {
    let mut ro = ro.clone();
    // The reader's lease also covers the chunks the writer holds in flight.
    ro.extra_buffers = wo.queue_depth.max(1) + 1;
    let mut reader = Reader::open(src, &ro)?;
    let smeta = reader.file().metadata().map_err(|e| Error::io("stat", src, e))?;
    if let Ok(dmeta) = std::fs::metadata(dst) {
        if dmeta.dev() == smeta.dev() && dmeta.ino() == smeta.ino() {
            return Err(Error::new(ErrorKind::SameFile, "copy", dst, format!("'{}' and '{}' are the same file", src.display(), dst.display())));
        }
    }
    let mut wo = wo.clone();
    wo.size_hint = Some(reader.len());
    // Under a budget smaller than asked for, the writer may only hold what the reader's lease
    // leaves beyond its read-ahead and the chunk in hand; none left means write-through.
    wo.queue_depth = wo.queue_depth.min(reader.buffers().saturating_sub(reader.queue_depth() + 1));
    let mut writer = Writer::create(dst, &wo)?;
    while let Some(chunk) = reader.next_chunk()? {
        if progress.is_cancelled() {
            return Err(Error::new(ErrorKind::Interrupted, "copy", dst, "interrupted"));
        }
        let n = chunk.len() as u64;
        writer.write_chunk(chunk)?;
        progress.add_bytes(n);
    }
    let write = writer.finish()?;
    progress.file_done();
    Ok(CopyReport { src: src.to_path_buf(), read: reader.decision().clone(), read_backend: reader.backend().cloned(), write })
}
