//! What a URL names: an S3 bucket and key (or prefix), or an HTTP origin and path.
//!
//! An S3 key is taken exactly as written after the bucket, as the AWS CLI and rclone take it:
//! `s3://b/ünï %20.txt` is the key `ünï %20.txt`, never decoded nor encoded again (it is
//! encoded once, as S3 asks, when a request is made). An HTTP URL's path is sent as the `url`
//! crate writes it (as curl sends it: spaces and bytes beyond ASCII percent-encoded, `%20` left
//! as it is), and its user and password, if any, go with each request as Basic credentials and
//! are never shown.

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
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Location {
    scheme: Scheme,
    /// The bucket, or the origin (`https://host:port`).
    root: String,
    /// The key (S3, as written), or the path as sent (HTTP, percent-encoded), without a leading
    /// slash; a prefix ends in `/`.
    key: String,
    /// HTTP only: the query, as sent (a signed URL's signature: never shown).
    query: Option<String>,
    /// HTTP only: the user and password of the URL (Basic credentials: never shown).
    user: Option<(String, String)>,
}

impl fmt::Debug for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // What Display shows: never a password or a query's signature.
        write!(f, "Location({self})")
    }
}

/// Whether `s` is written as a URL this crate reads (`s3://`, `http://`, `https://`). Front
/// ends use it to tell remote operands from local paths: a local path that looks like one is
/// written `./s3://...`.
pub fn is_url(s: &str) -> bool {
    ["s3://", "http://", "https://"].iter().any(|p| s.len() > p.len() && s.as_bytes()[..p.len()].eq_ignore_ascii_case(p.as_bytes()))
}

/// The URL an operand given as a path is written as (see [`is_url`]), if it is one.
pub fn url_of(p: &std::path::Path) -> Option<&str> {
    p.to_str().filter(|s| is_url(s))
}

impl Location {
    /// Parses `s3://bucket/key`, `s3://bucket/prefix/`, `s3://bucket` or an `http(s)://` URL
    /// (with a user and password, and a query, if it has them).
    pub fn parse(text: &str) -> Result<Location> {
        let lower = text.get(..8).unwrap_or(text).to_ascii_lowercase();
        if lower.starts_with("s3://") {
            let bad = |why: &str| Error::new(ErrorKind::InvalidInput, "parse", text, why.to_string());
            let rest = &text[5..];
            let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(bad("no bucket: write s3://BUCKET/KEY"));
            }
            return Ok(Location { scheme: Scheme::S3, root: bucket.to_string(), key: key.to_string(), query: None, user: None });
        }
        if lower.starts_with("http://") || lower.starts_with("https://") {
            // The error names the URL without its password.
            let u = url::Url::parse(text).map_err(|e| Error::new(ErrorKind::InvalidInput, "parse", redact_userinfo(text), format!("not a URL: {e}")))?;
            let bad = |why: &str| Error::new(ErrorKind::InvalidInput, "parse", redact_userinfo(text), why.to_string());
            if u.host_str().is_none_or(str::is_empty) {
                return Err(bad("no host"));
            }
            if u.fragment().is_some() {
                return Err(bad("a fragment (#...) names no object: remove it"));
            }
            let user = (!u.username().is_empty() || u.password().is_some()).then(|| (decode(u.username()), decode(u.password().unwrap_or(""))));
            let origin = u.origin().ascii_serialization();
            let key = u.path().strip_prefix('/').unwrap_or(u.path()).to_string();
            return Ok(Location { scheme: Scheme::Http, root: origin, key, query: u.query().map(str::to_string), user });
        }
        Err(Error::new(ErrorKind::InvalidInput, "parse", text, "not an s3://, http:// or https:// URL"))
    }

    /// The store this URL is in.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The bucket (S3) or origin (HTTP).
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The key (S3, exactly as written) or the path as sent (HTTP), without a leading slash.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Whether this names a prefix (a "folder"): empty, or ending in `/`.
    pub fn is_prefix(&self) -> bool {
        self.key.is_empty() || self.key.ends_with('/')
    }

    /// The last component of the key: what a download is named in a folder (an HTTP path's
    /// last part percent-decoded, as wget names it). `None` for a prefix, or a last part that
    /// is `.`, `..` or decodes to something that is no file name (a `/`, a NUL).
    pub fn file_name(&self) -> Option<String> {
        let last = self.key.trim_end_matches('/').rsplit('/').next().filter(|n| !n.is_empty())?;
        let name = match self.scheme {
            Scheme::S3 => last.to_string(),
            Scheme::Http => decode(last),
        };
        (name != "." && name != ".." && !name.contains(['/', '\0'])).then_some(name)
    }

    /// The same bucket or origin with another key (no query).
    pub fn with_key(&self, key: impl Into<String>) -> Location {
        Location { scheme: self.scheme, root: self.root.clone(), key: key.into(), query: None, user: self.user.clone() }
    }

    /// Same store (one client serves both).
    pub fn same_store(&self, other: &Location) -> bool {
        self.scheme == other.scheme && self.root == other.root && self.user == other.user
    }

    /// HTTP only: the URL a request is sent to (with its query, without its user).
    pub(crate) fn request_url(&self) -> String {
        match &self.query {
            Some(q) => format!("{}/{}?{q}", self.root, self.key),
            None => format!("{}/{}", self.root, self.key),
        }
    }

    /// HTTP only: the URL's user and password.
    pub(crate) fn user(&self) -> Option<&(String, String)> {
        self.user.as_ref()
    }
}

/// `s` percent-decoded (as UTF-8, lossily).
fn decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned()
}

/// `text` with the password of a URL's user part replaced (`http://user:***@host/...`).
fn redact_userinfo(text: &str) -> String {
    let Some(scheme_end) = text.find("://") else { return text.to_string() };
    let rest = &text[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let user = rest[..at].split(':').next().unwrap_or("");
            format!("{}{user}:***@{}", &text[..scheme_end + 3], &rest[at + 1..])
        }
        None => text.to_string(),
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.scheme {
            Scheme::S3 => write!(f, "s3://{}/{}", self.root, self.key),
            // Neither the password nor a query (a signed URL's signature) is ever shown.
            Scheme::Http => write!(f, "{}/{}{}", self.root, self.key, if self.query.is_some() { "?…" } else { "" }),
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
        assert_eq!(l.file_name().as_deref(), Some("b.bin"));
        assert_eq!(l.to_string(), "s3://bucket/a/b.bin");
        let p = Location::parse("s3://bucket/a/").unwrap();
        assert!(p.is_prefix());
        assert!(Location::parse("s3://bucket").unwrap().is_prefix());
        let h = Location::parse("http://127.0.0.1:8080/x/y.tar.zst").unwrap();
        assert_eq!((h.scheme(), h.root(), h.key()), (Scheme::Http, "http://127.0.0.1:8080", "x/y.tar.zst"));
        assert_eq!(h.to_string(), "http://127.0.0.1:8080/x/y.tar.zst");
        for bad in ["s3:///key", "http://", "ftp://x/y", "http://h/p#frag", "/local/path"] {
            assert!(Location::parse(bad).is_err(), "{bad}");
        }
        assert!(is_url("S3://b/k") && is_url("https://h/p") && !is_url("./s3://b/k") && !is_url("s3://"));
    }

    #[test]
    fn s3_keys_are_taken_exactly_as_written() {
        for key in ["ünï.txt", "a b.txt", "a%20b", "+%?#[]*|^~=.bin", "a//b", "k/"] {
            let l = Location::parse(&format!("s3://b/{key}")).unwrap();
            assert_eq!(l.key(), key);
            assert_eq!(l.to_string(), format!("s3://b/{key}"));
        }
    }

    #[test]
    fn http_paths_are_sent_as_curl_sends_them_and_credentials_never_shown() {
        let h = Location::parse("http://h/a%20b/ü ~x.bin").unwrap();
        assert_eq!(h.key(), "a%20b/%C3%BC%20~x.bin");
        assert_eq!(h.file_name().as_deref(), Some("ü ~x.bin"));
        let u = Location::parse("https://user:pa%3Ass@h:8443/f?X-Amz-Signature=abc").unwrap();
        assert_eq!(u.user(), Some(&("user".to_string(), "pa:ss".to_string())));
        assert_eq!(u.to_string(), "https://h:8443/f?…");
        assert_eq!(format!("{u:?}"), "Location(https://h:8443/f?…)");
        assert_eq!(u.request_url(), "https://h:8443/f?X-Amz-Signature=abc");
        assert_eq!(redact_userinfo("http://u:secret@h/p"), "http://u:***@h/p");
        assert!(Location::parse("http://h/a/%2E%2E").unwrap().file_name().is_none());
    }
}
