//! The safetensors header: an 8-byte little-endian length, then that many bytes of JSON naming
//! each tensor's dtype, shape and byte span in the data section that follows.
//!
//! Parsing uses the `safetensors` crate's types; validation is done here with checked
//! arithmetic and messages that name the tensor and the figures, then cross-checked with the
//! crate's own validation so that every file accepted here loads in the `safetensors` package.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use cacheless::conv::usize_of;
use safetensors::tensor::{Metadata, TensorInfo};
use serde::Deserialize;

pub use safetensors::Dtype;

use crate::error::{Error, Result};

/// The largest header accepted, as in the `safetensors` package (100 MB).
pub const MAX_HEADER_LEN: u64 = 100_000_000;

/// Bytes of the length prefix.
pub const PREFIX: u64 = 8;
/// [`PREFIX`] as a memory length.
pub const PREFIX_LEN: usize = 8;

/// One tensor of a file, with its span as absolute file offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorEntry {
    /// The name.
    pub name: String,
    /// The element type.
    pub dtype: Dtype,
    /// The shape (empty for a 0-d tensor).
    pub shape: Vec<usize>,
    /// File offset of the first byte.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
}

impl TensorEntry {
    /// File offset one past the last byte.
    pub fn end(&self) -> u64 {
        self.offset + self.len
    }
}

/// Bytes that `shape` elements of `dtype` take, or `None` when the count overflows or is not a
/// whole number of bytes (sub-byte dtypes).
pub fn nbytes(dtype: Dtype, shape: &[usize]) -> Option<u64> {
    let elements = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d as u64))?;
    let bits = elements.checked_mul(dtype.bitsize() as u64)?;
    (bits % 8 == 0).then_some(bits / 8)
}

/// The JSON object, with the crate's tensor description for every key but `__metadata__`.
#[derive(Deserialize)]
struct RawHeader {
    #[serde(rename = "__metadata__")]
    metadata: Option<HashMap<String, String>>,
    #[serde(flatten)]
    tensors: HashMap<String, TensorInfo>,
}

/// A parsed and validated header.
#[derive(Debug, Clone)]
pub struct Header {
    path: PathBuf,
    file_len: u64,
    data_start: u64,
    tensors: Vec<TensorEntry>,
    index: HashMap<String, usize>,
    metadata: Option<HashMap<String, String>>,
}

impl Header {
    /// Reads the length prefix (the first 8 bytes of the file) and returns where the data
    /// section starts (8 + header length), after checking it against the limit and the file.
    pub fn data_start(path: &Path, file_len: u64, prefix: &[u8]) -> Result<u64> {
        let Some(first) = prefix.get(..PREFIX_LEN) else {
            return Err(Error::invalid(path, format!("file is {file_len} bytes, too short for a safetensors header (an 8-byte length, then JSON)")));
        };
        let mut b = [0u8; 8];
        b.copy_from_slice(first);
        let n = u64::from_le_bytes(b);
        if n > MAX_HEADER_LEN {
            return Err(Error::invalid(path, format!("header length {n} exceeds the limit of {MAX_HEADER_LEN} bytes (not a safetensors file?)")));
        }
        let start = PREFIX + n;
        if start > file_len {
            return Err(Error::invalid(
                path,
                format!("header length {n} runs past the end of the file ({file_len} bytes): truncated or not a safetensors file"),
            ));
        }
        Ok(start)
    }

    /// Parses the header JSON (`json` is the `data_start - 8` bytes after the prefix) of a file
    /// of `file_len` bytes and checks every tensor against the file.
    pub fn parse(path: &Path, file_len: u64, json: &[u8]) -> Result<Header> {
        let data_start = PREFIX + json.len() as u64;
        if data_start > file_len {
            return Err(Error::invalid(path, format!("header of {} bytes runs past the end of the file ({file_len} bytes)", json.len())));
        }
        let text = std::str::from_utf8(json).map_err(|e| Error::invalid(path, format!("header is not UTF-8 ({e})")))?;
        let raw: RawHeader = serde_json::from_str(text).map_err(|e| Error::invalid(path, format!("header is not valid safetensors JSON: {e}")))?;
        let data_len = file_len - data_start;
        let mut list: Vec<(String, TensorInfo)> = raw.tensors.into_iter().collect();
        list.sort_by(|a, b| a.1.data_offsets.cmp(&b.1.data_offsets).then_with(|| a.0.cmp(&b.0)));
        let mut tensors = Vec::with_capacity(list.len());
        let mut end_so_far = 0u64;
        let mut prev: Option<&str> = None;
        for (name, info) in &list {
            let (s, e) = (info.data_offsets.0 as u64, info.data_offsets.1 as u64);
            if e < s {
                return Err(Error::invalid(path, format!("tensor '{name}': data_offsets [{s}, {e}] end before they start")));
            }
            if s < end_so_far {
                let other = prev.unwrap_or("?");
                return Err(Error::invalid(path, format!("tensor '{name}' (data bytes {s}..{e}) overlaps tensor '{other}', which ends at {end_so_far}")));
            }
            if s > end_so_far {
                return Err(Error::invalid(
                    path,
                    format!("{} unused data bytes before tensor '{name}' (data bytes {s}..{e}): tensors must be contiguous", s - end_so_far),
                ));
            }
            let need = nbytes(info.dtype, &info.shape).ok_or_else(|| {
                Error::invalid(path, format!("tensor '{name}': shape {:?} of {} overflows or is not a whole number of bytes", info.shape, info.dtype))
            })?;
            if e - s != need {
                return Err(Error::invalid(
                    path,
                    format!("tensor '{name}': data_offsets span {} bytes but shape {:?} of {} needs {need}", e - s, info.shape, info.dtype),
                ));
            }
            if e > data_len {
                return Err(Error::invalid(path, format!("tensor '{name}' ends at data byte {e} but the file holds only {data_len} bytes of data: truncated")));
            }
            tensors.push(TensorEntry { name: name.clone(), dtype: info.dtype, shape: info.shape.clone(), offset: data_start + s, len: need });
            end_so_far = e;
            prev = Some(name);
        }
        if end_so_far != data_len {
            return Err(Error::invalid(
                path,
                format!(
                    "the header describes {end_so_far} bytes of tensor data but the file holds {data_len} after the header ({} bytes unaccounted for)",
                    data_len - end_so_far
                ),
            ));
        }
        // The crate's own check, so that what loads here loads in the safetensors package too.
        Metadata::new(raw.metadata.clone(), list).map_err(|e| Error::invalid(path, format!("header rejected: {e}")))?;
        let index = tensors.iter().enumerate().map(|(i, t)| (t.name.clone(), i)).collect();
        Ok(Header { path: path.to_path_buf(), file_len, data_start, tensors, index, metadata: raw.metadata })
    }

    /// Parses a whole file held in memory.
    pub fn from_bytes(path: &Path, bytes: &[u8]) -> Result<Header> {
        let start = Header::data_start(path, bytes.len() as u64, bytes)?;
        Header::parse(path, bytes.len() as u64, &bytes[PREFIX_LEN..usize_of(start)])
    }

    /// The file this header came from.
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// The file's length.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }
    /// File offset of the data section (8 + header length).
    pub fn data_offset(&self) -> u64 {
        self.data_start
    }
    /// Every tensor, in file order.
    pub fn tensors(&self) -> &[TensorEntry] {
        &self.tensors
    }
    /// The tensor named `name`.
    pub fn get(&self, name: &str) -> Option<&TensorEntry> {
        self.index.get(name).map(|&i| &self.tensors[i])
    }
    /// The tensor named `name`, or an error naming the file.
    pub fn require(&self, name: &str) -> Result<&TensorEntry> {
        self.get(name).ok_or_else(|| Error::NoTensor { path: self.path.clone(), name: name.to_string() })
    }
    /// The free-form `__metadata__`.
    pub fn metadata(&self) -> Option<&HashMap<String, String>> {
        self.metadata.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(json: &str, data: usize) -> Vec<u8> {
        let mut v = (json.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(json.as_bytes());
        v.extend(std::iter::repeat_n(7u8, data));
        v
    }

    fn err(bytes: &[u8]) -> String {
        Header::from_bytes(Path::new("m.safetensors"), bytes).unwrap_err().to_string()
    }

    #[test]
    fn valid_header_lists_tensors_in_file_order() {
        let j = r#"{"__metadata__":{"k":"v"},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"e":{"dtype":"F16","shape":[0,3],"data_offsets":[12,12]}}"#;
        let h = Header::from_bytes(Path::new("x"), &file(j, 12)).unwrap();
        let names: Vec<_> = h.tensors().iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "e"]);
        let b = h.get("b").unwrap();
        assert_eq!((b.offset, b.len), (8 + j.len() as u64 + 4, 8));
        assert_eq!(h.metadata().unwrap()["k"], "v");
        assert!(h.get("zz").is_none());
    }

    #[test]
    fn malformed_headers_name_the_file_and_the_fault() {
        assert!(err(b"abc").contains("too short"));
        assert!(err(&u64::MAX.to_le_bytes()).contains("exceeds the limit"));
        assert!(err(&[200, 0, 0, 0, 0, 0, 0, 0, b'{', b'}']).contains("runs past the end"));
        assert!(err(&file("{not json", 0)).contains("not valid safetensors JSON"));
        assert!(err(&file(r#"{"a":{"dtype":"F99","shape":[1],"data_offsets":[0,4]}}"#, 4)).contains("not valid safetensors JSON"));
        let overlap = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#;
        assert!(err(&file(overlap, 8)).contains("overlaps tensor 'a'"));
        let gap = r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#;
        assert!(err(&file(gap, 8)).contains("unused data bytes"));
        let mismatch = r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#;
        assert!(err(&file(mismatch, 8)).contains("needs 12"));
        let truncated = r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#;
        assert!(err(&file(truncated, 10)).contains("truncated"));
        let extra = r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#;
        assert!(err(&file(extra, 9)).contains("5 bytes unaccounted"));
        let huge = r#"{"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}}"#;
        assert!(err(&file(huge, 8)).contains("overflows"));
        let backwards = r#"{"a":{"dtype":"U8","shape":[0],"data_offsets":[8,0]}}"#;
        assert!(err(&file(backwards, 8)).contains("end before they start"));
        for e in [err(b"abc"), err(&file("{not json", 0))] {
            assert!(e.starts_with("m.safetensors: "), "{e}");
        }
    }

    #[test]
    fn sizes_use_checked_arithmetic() {
        assert_eq!(nbytes(Dtype::F32, &[2, 3]), Some(24));
        assert_eq!(nbytes(Dtype::F32, &[]), Some(4));
        assert_eq!(nbytes(Dtype::F4, &[3]), None);
        assert_eq!(nbytes(Dtype::F4, &[4]), Some(2));
        assert_eq!(nbytes(Dtype::U64, &[usize::MAX, 2]), None);
    }
}
