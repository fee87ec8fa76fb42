//! What is S3's own in a request: where an object's URL is (the endpoint, path or virtual-host
//! style, the key encoded once as S3 asks), the SigV4 signature (object_store's `AwsAuthorizer`
//! over the credentials of its AWS credential chain), and the XML documents S3 answers with
//! (a listing, an error, a multipart upload's id and result), read with quick-xml.
//!
//! Requests are made here rather than through object_store's `ObjectStore`, whose `Path` cannot
//! name every key S3 holds (it percent-encodes `%`, `~`, `#`, `[`, ... and anything beyond ASCII
//! a second time, strips a trailing `/`, and fails a whole listing on a key with a `..` part or
//! a control character), and whose errors carry the server's whole answer.

use std::sync::Arc;
use std::time::SystemTime;

use object_store::aws::{AmazonS3Builder, AwsAuthorizer, AwsCredential, AwsCredentialProvider};
use serde::Deserialize;

/// The error and its causes, each once ("a: b: c"): the words of a failure from the
/// credential chain, the signer or the HTTP client.
pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur = Some(e);
    while let Some(x) = cur {
        let s = x.to_string();
        if !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
        cur = x.source();
    }
    parts.join(": ")
}

/// One S3 store's addressing and signing.
pub(crate) struct S3 {
    /// `http(s)://host[:port]` of the endpoint (AWS's regional endpoint, or a custom one).
    pub(crate) endpoint: String,
    /// Buckets as the first part of the path (custom endpoints, names that are no host name);
    /// else as the first label of the host (AWS).
    pub(crate) path_style: bool,
    pub(crate) bucket: String,
    pub(crate) region: String,
    /// `None`: requests go unsigned (`--no-sign-request`).
    pub(crate) credentials: Option<AwsCredentialProvider>,
}

impl std::fmt::Debug for S3 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3").field("endpoint", &self.endpoint).field("bucket", &self.bucket).field("region", &self.region).finish_non_exhaustive()
    }
}

/// Bytes S3's URI encoding leaves as they are: the unreserved characters, and `/` in a path.
const KEEP: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// `s` encoded as S3's SigV4 `UriEncode` encodes a key: every byte but the unreserved ones (and
/// `/` where `path`).
pub(crate) fn uri_encode(s: &str, path: bool) -> String {
    if path {
        s.split('/').map(|p| percent_encoding::utf8_percent_encode(p, KEEP).to_string()).collect::<Vec<_>>().join("/")
    } else {
        percent_encoding::utf8_percent_encode(s, KEEP).to_string()
    }
}

/// Whether a key can be sent as it is: HTTP clients (and the URL standard they follow) resolve
/// a path's `.` and `..` parts before sending it, so a key with one would reach another object.
pub(crate) fn sendable(key: &str) -> bool {
    !key.split('/').any(|p| p == "." || p == ".." || p.eq_ignore_ascii_case("%2e") || p.eq_ignore_ascii_case("%2e%2e"))
}

impl S3 {
    /// The store of `bucket`: `endpoint` (or AWS's for `region`), credentials from `keys` (the
    /// AWS credential chain) unless unsigned.
    pub(crate) fn new(bucket: &str, region: &str, endpoint: Option<&str>, keys: Option<AmazonS3Builder>) -> Result<S3, String> {
        let (endpoint, path_style) = match endpoint {
            Some(e) => (e.trim_end_matches('/').to_string(), true),
            // Virtual-host style where the bucket can be a host name (no dots: TLS wildcards
            // cover one label), as AWS asks; else path style.
            None => {
                let dns = !bucket.contains('.') && bucket.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
                (format!("https://s3.{region}.amazonaws.com"), !dns)
            }
        };
        let credentials = match keys {
            None => None,
            Some(b) => Some(b.build().map_err(|e| chain(&e))?.credentials().clone()),
        };
        Ok(S3 { endpoint, path_style, bucket: bucket.to_string(), region: region.to_string(), credentials })
    }

    /// The bucket's URL (what a listing or a multipart request is sent to), ending in `/`.
    pub(crate) fn bucket_url(&self) -> String {
        if self.path_style {
            format!("{}/{}/", self.endpoint, uri_encode(&self.bucket, false))
        } else {
            let (scheme, host) = self.endpoint.split_once("://").unwrap_or(("https", &self.endpoint));
            format!("{scheme}://{}.{host}/", self.bucket)
        }
    }

    /// The object's URL.
    pub(crate) fn object_url(&self, key: &str) -> String {
        format!("{}{}", self.bucket_url(), uri_encode(key, true))
    }

    /// The current credential, or `None` for unsigned requests.
    pub(crate) async fn credential(&self) -> Result<Option<Arc<AwsCredential>>, String> {
        match &self.credentials {
            None => Ok(None),
            Some(c) => c.get_credential().await.map(Some).map_err(|e| chain(&e)),
        }
    }

    /// Signs `req` (SigV4, payload unsigned: TLS or the ETag checks guard the bytes) with
    /// `cred`: the headers it adds (date, content hash, token, authorization).
    pub(crate) fn sign(&self, req: &mut reqwest::Request, cred: &AwsCredential) -> Result<(), String> {
        let mut signed = http::Request::builder()
            .method(req.method().clone())
            .uri(req.url().as_str())
            .body(object_store::client::HttpRequestBody::empty())
            .map_err(|e| e.to_string())?;
        *signed.headers_mut() = req.headers().clone();
        AwsAuthorizer::new(cred, "s3", &self.region).with_sign_payload(false).try_authorize(&mut signed, None).map_err(|e| chain(&e))?;
        *req.headers_mut() = signed.headers().clone();
        Ok(())
    }
}

/// An S3 error document's code and message.
#[derive(Debug, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct ErrorDoc {
    #[serde(default)]
    pub(crate) code: Option<String>,
    #[serde(default)]
    pub(crate) message: Option<String>,
}

/// The code and message of an S3 error document, if `body` is one (read as XML, else, for a
/// document that is not well formed, from its `<Code>` and `<Message>` elements as text).
pub(crate) fn error_doc(body: &str) -> Option<ErrorDoc> {
    let doc = match quick_xml::de::from_str::<ErrorDoc>(body) {
        Ok(d) => d,
        Err(_) if body.contains("<Error") => {
            let element = |name: &str| {
                let open = format!("<{name}>");
                let start = body.find(&open)? + open.len();
                let end = body[start..].find(&format!("</{name}>"))? + start;
                quick_xml::escape::unescape(&body[start..end]).ok().map(|t| t.into_owned())
            };
            ErrorDoc { code: element("Code"), message: element("Message") }
        }
        Err(_) => return None,
    };
    (doc.code.is_some() || doc.message.is_some()).then_some(doc)
}

/// One object of a listing.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Contents {
    key: String,
    size: u64,
    #[serde(default, rename = "ETag")]
    e_tag: Option<String>,
    #[serde(default)]
    last_modified: Option<String>,
}

/// A page of ListObjectsV2.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ListPage {
    #[serde(default)]
    contents: Vec<Contents>,
    #[serde(default)]
    is_truncated: bool,
    #[serde(default)]
    next_continuation_token: Option<String>,
    #[serde(default)]
    encoding_type: Option<String>,
}

/// A listed object: its key as stored, size, ETag and time.
#[derive(Debug, Clone)]
pub(crate) struct Listed {
    pub(crate) key: String,
    pub(crate) size: u64,
    pub(crate) etag: Option<String>,
    pub(crate) last_modified: SystemTime,
}

/// Reads a page of ListObjectsV2 (asked with `encoding-type=url`: keys come percent-encoded, so
/// that any byte survives the XML): its objects, and the token of the next page.
pub(crate) fn list_page(body: &str) -> Result<(Vec<Listed>, Option<String>), String> {
    let page: ListPage = quick_xml::de::from_str(body).map_err(|e| format!("the server's listing is not one S3 writes: {e}"))?;
    let encoded = page.encoding_type.as_deref().is_some_and(|e| e.eq_ignore_ascii_case("url"));
    let mut out = Vec::with_capacity(page.contents.len());
    for c in page.contents {
        let key = if encoded { decode_listed(&c.key) } else { c.key };
        let last_modified = c.last_modified.as_deref().and_then(iso_time).unwrap_or(SystemTime::UNIX_EPOCH);
        out.push(Listed { key, size: c.size, etag: c.e_tag, last_modified });
    }
    let next = if page.is_truncated { page.next_continuation_token } else { None };
    if page.is_truncated && next.is_none() {
        return Err("the server says its listing goes on, but gives no token for the next page".into());
    }
    Ok((out, next))
}

/// A key from a listing asked with `encoding-type=url`: percent-decoded, `+` a space (as S3
/// encodes them, and as the AWS CLI decodes them).
fn decode_listed(k: &str) -> String {
    let plus = k.replace('+', " ");
    percent_encoding::percent_decode_str(&plus).decode_utf8_lossy().into_owned()
}

/// An ISO 8601 time as S3 writes it (`2026-12-06T04:08:32.000Z`).
pub(crate) fn iso_time(s: &str) -> Option<SystemTime> {
    chrono::DateTime::parse_from_rfc3339(s.trim()).ok().map(SystemTime::from)
}

/// An HTTP date (`Sun, 06 Dec 2026 04:08:32 GMT`).
pub(crate) fn http_time(s: &str) -> Option<SystemTime> {
    chrono::DateTime::parse_from_rfc2822(s.trim()).ok().map(SystemTime::from)
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Initiated {
    upload_id: String,
}

/// The upload id of an InitiateMultipartUploadResult.
pub(crate) fn upload_id(body: &str) -> Result<String, String> {
    let d: Initiated = quick_xml::de::from_str(body).map_err(|e| format!("the server's answer to a new multipart upload has no upload id: {e}"))?;
    Ok(d.upload_id)
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Completed {
    #[serde(default, rename = "ETag")]
    e_tag: Option<String>,
}

/// A CompleteMultipartUpload answer: the object's ETag, or the error S3 may send with a 200.
pub(crate) fn completed(body: &str) -> Result<Option<String>, ErrorDoc> {
    if let Some(e) = error_doc(body).filter(|d| d.code.is_some()) {
        if body.contains("<Error") {
            return Err(e);
        }
    }
    Ok(quick_xml::de::from_str::<Completed>(body).ok().and_then(|c| c.e_tag))
}

/// The body of a CompleteMultipartUpload request: each part's number and ETag.
pub(crate) fn complete_body(parts: &[(u64, String)]) -> String {
    let mut s = String::from("<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">");
    for (n, etag) in parts {
        s.push_str(&format!("<Part><PartNumber>{n}</PartNumber><ETag>{}</ETag></Part>", quick_xml::escape::escape(etag.as_str())));
    }
    s.push_str("</CompleteMultipartUpload>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_encoded_once_as_s3_asks() {
        assert_eq!(uri_encode("a b/ünï+%?#[]*|^~=.txt", true), "a%20b/%C3%BCn%C3%AF%2B%25%3F%23%5B%5D%2A%7C%5E~%3D.txt");
        assert_eq!(uri_encode("a/b", false), "a%2Fb");
        assert!(sendable("a/b..c/.d") && !sendable("p/../x") && !sendable("./x") && !sendable("a/%2e"));
    }

    #[test]
    fn listings_errors_and_uploads_read_as_s3_writes_them() {
        let page = r#"<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name><Prefix>p/</Prefix><KeyCount>2</KeyCount>
<MaxKeys>2</MaxKeys><EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>
<Contents><Key>p/a+b%0A%2B.txt</Key><LastModified>2026-12-06T04:08:32.000Z</LastModified><ETag>&quot;x&quot;</ETag><Size>3</Size></Contents>
<Contents><Key>p/dir/</Key><LastModified>2026-12-06T04:08:32.000Z</LastModified><Size>0</Size></Contents>
<NextContinuationToken>tok</NextContinuationToken></ListBucketResult>"#;
        let (objs, next) = list_page(page).unwrap();
        assert_eq!(objs.iter().map(|o| o.key.as_str()).collect::<Vec<_>>(), ["p/a b\n+.txt", "p/dir/"]);
        assert_eq!(objs[0].etag.as_deref(), Some("\"x\""));
        assert_eq!(objs[0].size, 3);
        assert_eq!(next.as_deref(), Some("tok"));
        let e = error_doc("<Error><Code>AccessDenied</Code><Message>Access Denied</Message><Secret>x</Secret></Error>").unwrap();
        assert_eq!((e.code.as_deref(), e.message.as_deref()), (Some("AccessDenied"), Some("Access Denied")));
        assert!(error_doc("<html>nope</html>").is_none());
        let broken = error_doc("<Error><Code>SlowDown</Code><Message>Reduce your rate</Message><Echo>a & b</Echo></Error>").unwrap();
        assert_eq!((broken.code.as_deref(), broken.message.as_deref()), (Some("SlowDown"), Some("Reduce your rate")));
        assert_eq!(
            upload_id("<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key><UploadId>u1</UploadId></InitiateMultipartUploadResult>").unwrap(),
            "u1"
        );
        assert_eq!(completed("<CompleteMultipartUploadResult><ETag>\"e-2\"</ETag></CompleteMultipartUploadResult>").unwrap().as_deref(), Some("\"e-2\""));
        assert!(completed("<Error><Code>InternalError</Code><Message>m</Message></Error>").is_err());
        assert_eq!(complete_body(&[(1, "\"a\"".into())]), "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Part><PartNumber>1</PartNumber><ETag>&quot;a&quot;</ETag></Part></CompleteMultipartUpload>");
        assert!(http_time("Sun, 06 Dec 2026 04:08:32 GMT").is_some() && iso_time("2026-12-06T04:08:32.000Z").is_some());
    }
}
