//! `s3://` and `http(s)://` objects for cacheless: downloads as many ranged GETs in flight,
//! each into a buffer leased from the job's memory budget and landed with direct I/O at its
//! offset; uploads read with direct I/O and sent as multipart uploads that appear only when
//! complete. Requests are reqwest's, signed with object_store's SigV4 over its AWS credential
//! chain, run on a small private tokio runtime behind blocking calls.
//!
//! ```no_run
//! use std::sync::atomic::AtomicBool;
//! use cacheless::WriteOptions;
//! use cacheless_remote::{download_file, Location, Remote, RemoteOptions};
//! let loc = Location::parse("s3://bucket/model.safetensors")?;
//! let remote = Remote::connect(&loc, &RemoteOptions::default())?;
//! let info = remote.head(&loc)?;
//! let report = download_file(&remote, &info, "model.safetensors".as_ref(), &WriteOptions::from(cacheless::IoOptions::default()), &AtomicBool::new(false), None)?;
//! println!("{} B in {} ranges, {}", report.fetch.bytes, report.fetch.ranges, report.write.decision.mode);
//! # Ok::<(), cacheless::Error>(())
//! ```
#![deny(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]
#![warn(missing_docs)]

mod client;
mod fetch;
pub mod limits;
mod location;
mod s3;
mod stream;
mod transfer;

pub use client::{check_writable, Credentials, ObjectInfo, Remote, RemoteOptions, DEFAULT_CONCURRENCY, DEFAULT_PART_SIZE, MAX_PARTS, MIN_PART_SIZE};
pub use fetch::{fetch, fetch_into, read_all, read_into, FetchReport, Ordered, Sink};
pub use location::{is_url, url_of, Location, Scheme};
pub use stream::{split_budget, upload_stream, ObjectReader, ObjectWriter, StreamReport, UploadHandle};
pub use transfer::{
    download_file, download_into, etag_is_md5, landed_etag, part_size, upload_file, verify_download, DownloadReport, UploadReport, Verified, ETAG_XATTR,
};
