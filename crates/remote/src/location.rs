//! What a URL names: an S3 bucket and key (or prefix), or an HTTP origin and path.

use std::fmt;

use cacheless::{Error, ErrorKind, Result};

/// The kind of store a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// `s3://bucket/key`: an S3-compatible store (AWS, or the endpoint in `AWS_ENDPOINT_URL`).
    S3,
    /// `http://host/path` or `https://host/path`: a web server.
    Http,
}

/// A parsed `s3://` or `http(s)://` URL.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Location {
    scheme: Scheme,
    /// The bucket, or the origin (`https://host:port`).
    root: String,
    /// The key or path, without a leading slash (may end in `/`: a prefix).
    key: String,
}

/// Whether `s` is written as a URL this crate reads (`s3://`, `http://`, `https://`). Front
/// ends use it to tell remote operands from local paths: a local path that looks like one is
/// written `./s3://...`.
pub fn is_url(s: &str) -> bool {
    ["s3://", "http://", "https://"].iter().any(|p| s.len() > p.len() && s[..p.len()].eq_ignore_ascii_case(p))
}

/// The URL an operand given as a path is written as (see [`is_url`]), if it is one.
pub fn url_of(p: &std::path::Path) -> Option<&str> {
    p.to_str().filter(|s| is_url(s))
}

impl Location {
    /// Parses `s3://bucket/key`, `s3://bucket/prefix/`, `s3://bucket` or an `http(s)://` URL.
    pub fn parse(text: &str) -> Result<Location> {
        let bad = |why: &str| Error::new(ErrorKind::InvalidInput, "parse", text, why.to_string());
        let lower = text.get(..8).unwrap_or(text).to_ascii_lowercase();
        if lower.starts_with("s3://") {
            let rest = &text[5..];
            let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(bad("no bucket: write s3://BUCKET/KEY"));
            }
            if key.starts_with('/') || key.contains("//") {
                return Err(bad("an empty path segment (//) in the key"));
            }
            return Ok(Location { scheme: Scheme::S3, root: bucket.to_string(), key: key.to_string() });
        }
        if lower.starts_with("http://") || lower.starts_with("https://") {
            let u = url::Url::parse(text).map_err(|e| bad(&format!("not a URL: {e}")))?;
            if u.host_str().is_none_or(str::is_empty) {
                return Err(bad("no host"));
            }
            if u.query().is_some() || u.fragment().is_some() {
                return Err(bad("a query (?...) or fragment (#...) is not supported"));
            }
            let origin = u.origin().ascii_serialization();
            let key = u.path().trim_start_matches('/').to_string();
            return Ok(Location { scheme: Scheme::Http, root: origin, key });
        }
        Err(bad("not an s3://, http:// or https:// URL"))
    }

    /// The store this URL is in.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The bucket (S3) or origin (HTTP).
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The key or path inside the bucket or origin, without a leading slash.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Whether this names a prefix (a "folder"): empty, or ending in `/`.
    pub fn is_prefix(&self) -> bool {
        self.key.is_empty() || self.key.ends_with('/')
    }

    /// The last component of the key (what a download is named in a folder).
    pub fn file_name(&self) -> Option<&str> {
        self.key.trim_end_matches('/').rsplit('/').next().filter(|n| !n.is_empty())
    }

    /// The same bucket or origin with another key.
    pub fn with_key(&self, key: impl Into<String>) -> Location {
        Location { scheme: self.scheme, root: self.root.clone(), key: key.into() }
    }

    /// Same store (one client serves both).
    pub fn same_store(&self, other: &Location) -> bool {
        self.scheme == other.scheme && self.root == other.root
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.scheme {
            Scheme::S3 => write!(f, "s3://{}/{}", self.root, self.key),
            Scheme::Http => write!(f, "{}/{}", self.root, self.key),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_into_their_store_and_key() {
        let l = Location::parse("s3://bucket/a/b.bin").unwrap();
        assert_eq!((l.scheme(), l.root(), l.key(), l.is_prefix()), (Scheme::S3, "bucket", "a/b.bin", false));
        assert_eq!(l.file_name(), Some("b.bin"));
        assert_eq!(l.to_string(), "s3://bucket/a/b.bin");
        let p = Location::parse("s3://bucket/a/").unwrap();
        assert!(p.is_prefix());
        assert!(Location::parse("s3://bucket").unwrap().is_prefix());
        let h = Location::parse("http://127.0.0.1:8080/x/y.tar.zst").unwrap();
        assert_eq!((h.scheme(), h.root(), h.key()), (Scheme::Http, "http://127.0.0.1:8080", "x/y.tar.zst"));
        assert_eq!(h.to_string(), "http://127.0.0.1:8080/x/y.tar.zst");
        for bad in ["s3:///key", "s3://b//k", "http://", "ftp://x/y", "http://h/p?q=1", "/local/path"] {
            assert!(Location::parse(bad).is_err(), "{bad}");
        }
        assert!(is_url("S3://b/k") && is_url("https://h/p") && !is_url("./s3://b/k") && !is_url("s3://"));
    }
}
