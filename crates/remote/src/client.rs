//! One store's client: object_store's S3 or HTTP client on a private tokio runtime, behind
//! blocking calls, and its errors turned into the engine's (naming the URL and what to try).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use cacheless::{Error, ErrorKind, Result};
use futures::StreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::http::HttpBuilder;
use object_store::path::Path as StorePath;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, ObjectStoreExt, RetryConfig};

use crate::location::{Location, Scheme};

/// Default bytes per ranged GET and per uploaded part. 8 MiB: what Run:ai's streamer and the
/// AWS CLI use; on loopback (docs/BENCHMARKS.md) 8 MiB ranges with 8 in flight reach the
/// server's rate, and smaller ones cost more requests' CPU on both ends.
pub const DEFAULT_PART_SIZE: usize = 8 << 20;
/// Default requests in flight per transfer.
pub const DEFAULT_CONCURRENCY: usize = 8;
/// S3's smallest part but the last, and its most parts per upload.
pub const MIN_PART_SIZE: usize = 5 << 20;
/// S3's most parts in one multipart upload.
pub const MAX_PARTS: u64 = 10_000;

/// How transfers run.
#[derive(Debug, Clone)]
pub struct RemoteOptions {
    /// Bytes per ranged GET (downloads) and per part (uploads; raised as needed to stay within
    /// 10,000 parts, and to at least S3's 5 MiB).
    pub part_size: usize,
    /// Requests in flight per transfer (each holds one buffer of `part_size` from the budget).
    pub concurrency: usize,
    /// Retries of a failed request (connection reset, 5xx, a stalled or cut body), with
    /// exponential backoff.
    pub retries: usize,
    /// A response that sends nothing for this long is abandoned and retried.
    pub stall: Duration,
    /// Send S3 requests unsigned (a public bucket; `--no-sign-request` as the AWS CLI says it).
    pub no_sign_request: bool,
    /// Settings over the environment's, by object_store's names (`aws_endpoint_url`,
    /// `aws_access_key_id`, `aws_region`, ...: the `storage_options` of deltalake and polars).
    pub storage_options: Vec<(String, String)>,
}

impl RemoteOptions {
    /// The bytes one ranged GET asks for: the part size in whole pages.
    pub fn range_size(&self) -> usize {
        let page = cacheless::sys::page_size();
        cacheless::round_up(self.part_size.max(page), page)
    }
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            part_size: DEFAULT_PART_SIZE,
            concurrency: DEFAULT_CONCURRENCY,
            retries: 5,
            stall: Duration::from_secs(20),
            no_sign_request: false,
            storage_options: Vec::new(),
        }
    }
}

/// An object's identity and size, as the server states it.
#[derive(Debug, Clone)]
pub struct ObjectInfo {
    /// Where it is.
    pub location: Location,
    /// Its size in bytes.
    pub size: u64,
    /// Its ETag (pins the version a transfer reads), when the server gives one.
    pub etag: Option<String>,
    /// When it was last written.
    pub last_modified: SystemTime,
    /// Its version, where the bucket keeps versions.
    pub version: Option<String>,
}

/// A client for one bucket (S3) or origin (HTTP), with the runtime its requests run on.
pub struct Remote {
    pub(crate) rt: tokio::runtime::Runtime,
    pub(crate) store: Arc<dyn ObjectStore>,
    pub(crate) root: Location,
    pub(crate) opts: RemoteOptions,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote").field("root", &self.root).field("opts", &self.opts).finish_non_exhaustive()
    }
}

impl Remote {
    /// A client for `loc`'s bucket or origin. S3 reads the usual AWS environment:
    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION` (or
    /// `AWS_DEFAULT_REGION`; us-east-1 when unset), `AWS_ENDPOINT_URL` (a custom endpoint,
    /// addressed path-style; `http://` allowed), and the web-identity and container credential
    /// variables. Sends no request.
    pub fn connect(loc: &Location, opts: &RemoteOptions) -> Result<Remote> {
        let fail = |e: object_store::Error| Error::new(ErrorKind::InvalidInput, "connect", loc.to_string(), chain(&e));
        let retry = RetryConfig {
            backoff: BackoffConfig { init_backoff: Duration::from_millis(100), max_backoff: Duration::from_secs(5), base: 2.0 },
            max_retries: opts.retries,
            retry_timeout: Duration::from_secs(180),
        };
        // No limit on a whole request (an unranged GET of a large object takes as long as it
        // takes); a response that stalls is cut by the read timeout and retried.
        let client = ClientOptions::new()
            .with_timeout_disabled()
            .with_connect_timeout(Duration::from_secs(5))
            .with_read_timeout(opts.stall)
            .with_pool_max_idle_per_host(opts.concurrency.max(1) * 2);
        let store: Arc<dyn ObjectStore> = match loc.scheme() {
            Scheme::S3 => {
                let mut b = AmazonS3Builder::from_env().with_bucket_name(loc.root()).with_retry(retry);
                let given = |names: &[&str]| {
                    let option = opts.storage_options.iter().find(|(k, _)| names.iter().any(|n| k.eq_ignore_ascii_case(n))).map(|(_, v)| v.clone());
                    option.or_else(|| names.iter().find_map(|n| std::env::var(n.to_ascii_uppercase()).ok()))
                };
                let endpoint = given(&["aws_endpoint_url_s3", "aws_endpoint_url", "aws_endpoint"]);
                let plain = endpoint.as_deref().is_some_and(|e| e.to_ascii_lowercase().starts_with("http://"));
                if given(&["aws_region", "aws_default_region"]).is_none() {
                    b = b.with_region("us-east-1");
                }
                for (k, v) in &opts.storage_options {
                    let key = k.to_ascii_lowercase().parse().map_err(fail)?;
                    b = b.with_config(key, v);
                }
                if opts.no_sign_request {
                    b = b.with_skip_signature(true);
                }
                Arc::new(b.with_client_options(client.with_allow_http(plain)).build().map_err(fail)?)
            }
            Scheme::Http => {
                let b = HttpBuilder::new().with_url(loc.root()).with_retry(retry).with_client_options(client.with_allow_http(true));
                Arc::new(b.build().map_err(fail)?)
            }
        };
        let threads = std::thread::available_parallelism().map_or(2, usize::from).clamp(1, 4);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("cacheless-net")
            .enable_all()
            .build()
            .map_err(|e| Error::io("start the network runtime", loc.to_string(), e))?;
        Ok(Remote { rt, store, root: loc.with_key(""), opts: opts.clone() })
    }

    /// The options transfers use.
    pub fn options(&self) -> &RemoteOptions {
        &self.opts
    }

    /// Whether this client serves `loc`.
    pub fn serves(&self, loc: &Location) -> bool {
        self.root.same_store(loc)
    }

    pub(crate) fn path(loc: &Location) -> StorePath {
        StorePath::from(loc.key().trim_end_matches('/'))
    }

    /// The object's size and identity (a HEAD request).
    pub fn head(&self, loc: &Location) -> Result<ObjectInfo> {
        let path = Remote::path(loc);
        let meta = self.rt.block_on(self.store.head(&path)).map_err(|e| remote_error("stat", loc, &e))?;
        Ok(info_of(loc.clone(), &meta))
    }

    /// Every object under the prefix `loc` (S3), in key order.
    pub fn list(&self, loc: &Location) -> Result<Vec<ObjectInfo>> {
        if loc.scheme() != Scheme::S3 {
            return Err(Error::new(ErrorKind::Unsupported, "list", loc.to_string(), "an HTTP server has no listing: name each file's URL"));
        }
        let key = loc.key().trim_end_matches('/');
        let prefix = (!key.is_empty()).then(|| StorePath::from(key));
        let metas: Vec<_> = self.rt.block_on(self.store.list(prefix.as_ref()).collect::<Vec<_>>());
        let mut out = Vec::with_capacity(metas.len());
        for m in metas {
            let m = m.map_err(|e| remote_error("list", loc, &e))?;
            out.push(info_of(loc.with_key(m.location.as_ref()), &m));
        }
        out.sort_by(|a, b| a.location.key().cmp(b.location.key()));
        Ok(out)
    }

    /// Whether the server answers a ranged GET of the object with its range (206): an S3 store
    /// always does; a web server may not. An empty object has no range to ask for (true).
    pub fn ranges(&self, info: &ObjectInfo) -> Result<bool> {
        if info.size == 0 {
            return Ok(true);
        }
        let opts = object_store::GetOptions { range: Some(object_store::GetRange::Bounded(0..1)), if_match: info.etag.clone(), ..Default::default() };
        let path = Remote::path(&info.location);
        match self.rt.block_on(async { self.store.get_opts(&path, opts).await?.bytes().await }) {
            Ok(b) => Ok(b.len() == 1),
            Err(e) if not_partial(&e) => Ok(false),
            Err(e) => Err(remote_error("read", &info.location, &e)),
        }
    }
}

fn info_of(location: Location, m: &object_store::ObjectMeta) -> ObjectInfo {
    ObjectInfo { location, size: m.size, etag: m.e_tag.clone(), last_modified: SystemTime::from(m.last_modified), version: m.version.clone() }
}

/// An error unless `loc` can be uploaded to: an object's key (`InvalidInput` for a prefix), on
/// S3 (`Unsupported` for a web server, which takes none here).
pub(crate) fn check_writable(loc: &Location) -> Result<()> {
    if loc.is_prefix() {
        return Err(Error::new(ErrorKind::InvalidInput, "upload", loc.to_string(), "an upload needs an object's key, not a prefix (a URL ending in /)"));
    }
    match loc.scheme() {
        Scheme::S3 => Ok(()),
        Scheme::Http => Err(Error::new(ErrorKind::Unsupported, "upload", loc.to_string(), "uploads go to s3:// URLs; a web server takes none")),
    }
}

/// Whether `e` says the server answered a ranged GET with the whole object: object_store's
/// words for it (its HTTP client checks the server's Accept-Ranges first; the generic one, the
/// status).
pub(crate) fn not_partial(e: &object_store::Error) -> bool {
    let text = chain(e);
    text.contains("non-partial response") || text.contains("Range request not supported")
}

/// The error and its causes, each once ("a: b: c").
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

/// The engine's error for a failed request on `loc`: its kind, the server's words, and what to
/// try.
pub(crate) fn remote_error(op: &'static str, loc: &Location, e: &object_store::Error) -> Error {
    use object_store::Error as E;
    let text = chain(e);
    let (kind, msg, note): (ErrorKind, String, &str) = match e {
        E::NotFound { .. } => (
            ErrorKind::NotFound,
            "no such object".into(),
            match loc.scheme() {
                Scheme::S3 => "check the bucket and key (a prefix ends in /; `cacheless info URL` says what the server has)",
                Scheme::Http => "check the URL",
            },
        ),
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => (
            ErrorKind::PermissionDenied,
            format!("access denied: {text}"),
            "check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN (and AWS_REGION, AWS_ENDPOINT_URL); a public bucket takes --no-sign-request",
        ),
        E::Precondition { .. } => (
            ErrorKind::Changed,
            "the object was replaced during the transfer (its ETag changed)".into(),
            "run it again to fetch the new version; nothing of the old one was kept",
        ),
        _ if text.contains("error sending request") || text.contains("onnection refused") || text.contains("dns error") => {
            (ErrorKind::Io, format!("cannot reach the server: {text}"), "is it up? The endpoint is AWS_ENDPOINT_URL for s3://, the URL's host for http(s)://")
        }
        _ => (ErrorKind::Io, text, ""),
    };
    let err = Error::new(kind, op, loc.to_string(), msg);
    if note.is_empty() {
        err
    } else {
        err.with_note(note)
    }
}
