//! Saving: the bytes the `safetensors` crate writes, written durably with direct I/O.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::path::Path;

use cacheless::{ErrorKind, Progress, WriteOptions, WriteReport, Writer};
use safetensors::tensor::Metadata;
use safetensors::View;

use crate::error::{Error, Result};
use crate::header::{nbytes, Dtype};

/// Writes are handed to the engine in pieces this large, with a check for cancellation between.
const PIECE: usize = 16 << 20;

/// A tensor to save: its name, dtype, shape and little-endian bytes in C order.
#[derive(Debug, Clone, Copy)]
pub struct TensorData<'a> {
    /// The name.
    pub name: &'a str,
    /// The element type.
    pub dtype: Dtype,
    /// The shape (empty for a 0-d tensor).
    pub shape: &'a [usize],
    /// The bytes.
    pub data: &'a [u8],
}

/// A tensor as the `safetensors` crate's serializer sees it when only the header is wanted:
/// its data is empty, its length is the real one.
struct Described<'a> {
    dtype: Dtype,
    shape: &'a [usize],
    len: usize,
}

impl View for Described<'_> {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&[])
    }
    fn data_len(&self) -> usize {
        self.len
    }
}

/// The header (length prefix included) the `safetensors` crate writes for `tensors`, and the
/// tensors in the order their data follows it. `path` is for messages.
pub fn header<'t, 'a>(path: &Path, tensors: &'t [TensorData<'a>], metadata: Option<&HashMap<String, String>>) -> Result<(Vec<u8>, Vec<&'t TensorData<'a>>)> {
    let mut seen = HashSet::with_capacity(tensors.len());
    for t in tensors {
        if t.name == "__metadata__" {
            return Err(Error::invalid(path, "'__metadata__' is reserved for the metadata and cannot name a tensor"));
        }
        if !seen.insert(t.name) {
            return Err(Error::invalid(path, format!("two tensors are named '{}'", t.name)));
        }
        let need = nbytes(t.dtype, t.shape).ok_or_else(|| {
            Error::invalid(path, format!("tensor '{}': shape {:?} of {} overflows or is not a whole number of bytes", t.name, t.shape, t.dtype))
        })?;
        if need != t.data.len() as u64 {
            return Err(Error::invalid(
                path,
                format!("tensor '{}': {} bytes of data, but shape {:?} of {} needs {need}", t.name, t.data.len(), t.shape, t.dtype),
            ));
        }
    }
    let views = tensors.iter().map(|t| (t.name, Described { dtype: t.dtype, shape: t.shape, len: t.data.len() }));
    // The crate's serializer writes the header, then each view's (here empty) data.
    let head = safetensors::serialize(views, metadata.cloned()).map_err(|e| Error::invalid(path, format!("cannot build the header: {e}")))?;
    // It orders tensors by dtype alignment, then name: read that order back from its header.
    let meta: Metadata =
        serde_json::from_slice(&head[8..]).map_err(|e| Error::invalid(path, format!("internal error: the header just built does not parse: {e}")))?;
    let by_name: HashMap<&str, &TensorData<'a>> = tensors.iter().map(|t| (t.name, t)).collect();
    let order = meta.offset_keys().iter().filter_map(|n| by_name.get(n.as_str()).copied()).collect::<Vec<_>>();
    if order.len() != tensors.len() {
        return Err(Error::invalid(path, "internal error: the header just built lost a tensor"));
    }
    Ok((head, order))
}

/// The whole file in memory, as `safetensors.serialize` returns it.
pub fn serialize(tensors: &[TensorData<'_>], metadata: Option<&HashMap<String, String>>) -> Result<Vec<u8>> {
    let (mut out, order) = header(Path::new("<bytes>"), tensors, metadata)?;
    out.reserve(order.iter().map(|t| t.data.len()).sum());
    for t in order {
        out.extend_from_slice(t.data);
    }
    Ok(out)
}

/// Saves `tensors` to `path` byte-for-byte as the `safetensors` package does: under a temporary
/// name beside it, in the mode chosen for the file (direct I/O for large files), fsync'ed
/// and renamed over `path` (`opts.naming` and `opts.durability` are forced to `Temporary` and `EachFile`). Readers and mappings
/// of an old `path` keep seeing the old file. `progress` counts bytes and cancels; a failed or
/// cancelled save leaves `path` as it was and no temporary behind.
pub fn save(
    path: &Path,
    tensors: &[TensorData<'_>],
    metadata: Option<&HashMap<String, String>>,
    opts: &WriteOptions,
    progress: &Progress,
) -> Result<WriteReport> {
    let (report, file) = save_staged(path, tensors, metadata, opts, progress)?;
    file.publish(true)?;
    Ok(report)
}

/// [`save`] up to its rename: the complete, durable file under its temporary name, for the
/// caller to name with `PendingFile::publish(true)` once nothing stands in the way (a caller
/// that must not replace `path` after an interrupt came); dropped instead, it is removed.
pub fn save_staged(
    path: &Path,
    tensors: &[TensorData<'_>],
    metadata: Option<&HashMap<String, String>>,
    opts: &WriteOptions,
    progress: &Progress,
) -> Result<(WriteReport, cacheless::PendingFile)> {
    let (head, order) = header(path, tensors, metadata)?;
    let total = head.len() as u64 + order.iter().map(|t| t.data.len() as u64).sum::<u64>();
    progress.add_total_bytes(total);
    let mut wo = opts.clone();
    wo.size_hint = Some(total);
    wo.naming = cacheless::Naming::Temporary;
    wo.durability = cacheless::Durability::EachFile;
    let mut w = Writer::create(path, &wo)?;
    w.write_bytes(&head)?;
    progress.add_bytes(head.len() as u64);
    for t in order {
        for piece in t.data.chunks(PIECE) {
            if progress.is_cancelled() {
                return Err(cacheless::Error::new(ErrorKind::Interrupted, "save", path, "interrupted").into());
            }
            w.write_bytes(piece)?;
            progress.add_bytes(piece.len() as u64);
        }
    }
    Ok(w.finish_pending()?)
}
