//! One store's client: requests to an S3 bucket or a web server on a private tokio runtime,
//! behind blocking calls, and their failures turned into the engine's errors (naming the URL,
//! the server's code and message, never its whole answer nor a credential).
//!
//! The requests are reqwest's; S3's addressing, signatures and documents are in `s3`. Every
//! request but a download's ranged GET (which `fetch` retries as a whole, body included) is
//! retried here when it fails in a way that may pass (no connection, a reset, a stall, 429 or a
//! 5xx), at most `retries` times and for at most `retry_time`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use cacheless::{Error, ErrorKind, RateLimit, Result};
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION, CONTENT_LENGTH, CONTENT_RANGE, ETAG, IF_MATCH, LAST_MODIFIED, RANGE};
use reqwest::{Method, StatusCode};

use crate::location::{Location, Scheme};
use crate::s3::{self, chain, S3};

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

/// Access keys given in place of the AWS credential chain's.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// `AWS_ACCESS_KEY_ID`.
    pub key_id: String,
    /// `AWS_SECRET_ACCESS_KEY`.
    pub secret: String,
    /// `AWS_SESSION_TOKEN`.
    pub token: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials").field("key_id", &self.key_id).finish_non_exhaustive()
    }
}

/// How transfers run, and where the store is: what every door (the command line's flags,
/// Python's keywords) sets, each over the environment's value.
#[derive(Debug, Clone)]
pub struct RemoteOptions {
    /// Bytes per ranged GET (downloads) and per part (uploads; raised as needed to stay within
    /// 10,000 parts, and to at least S3's 5 MiB).
    pub part_size: usize,
    /// Requests in flight per transfer (each holds one buffer of `part_size` from the budget),
    /// and objects at a time in a copy of many.
    pub concurrency: usize,
    /// Retries of a failed request (no connection, a reset, 429 or a 5xx, a stalled or cut
    /// body), with backoff from 100 ms, doubling, at most 5 s apart.
    pub retries: usize,
    /// The longest a request is retried for, all attempts together.
    pub retry_time: Duration,
    /// A response that sends nothing for this long is abandoned (and retried).
    pub stall: Duration,
    /// Send S3 requests unsigned (a public bucket; `--no-sign-request` as the AWS CLI says it).
    pub no_sign_request: bool,
    /// The S3 endpoint (`--endpoint-url`), over `AWS_ENDPOINT_URL_S3` and `AWS_ENDPOINT_URL`;
    /// addressed path-style. Without one, AWS's endpoint for the region.
    pub endpoint: Option<String>,
    /// The S3 region (`--region`), over `AWS_REGION` and `AWS_DEFAULT_REGION`; us-east-1 when
    /// none is set.
    pub region: Option<String>,
    /// Access keys over the AWS credential chain's (environment, web identity, container,
    /// instance role).
    pub credentials: Option<Credentials>,
    /// Certificates (PEM) trusted for S3 beside the system's (`--ca-bundle`), over
    /// `AWS_CA_BUNDLE`. `SSL_CERT_FILE` and `SSL_CERT_DIR` set the system's own, for both
    /// S3 and HTTPS.
    pub ca_bundle: Option<PathBuf>,
    /// The bytes per second every transfer of the job shares (`--bwlimit`).
    pub rate: Option<Arc<RateLimit>>,
    /// Keys per listing request (S3's largest page, 1000, by default).
    pub list_page: usize,
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
            retry_time: Duration::from_secs(120),
            stall: Duration::from_secs(20),
            no_sign_request: false,
            endpoint: None,
            region: None,
            credentials: None,
            ca_bundle: None,
            rate: None,
            list_page: 1000,
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

/// How a request failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The server answered with an error status: the code and message of its error document,
    /// where it sent one (S3), never the rest of it.
    Status { status: StatusCode, code: Option<String>, message: Option<String>, attempts: usize },
    /// No answer: no connection, a reset, a stall, a TLS failure.
    Transport { what: String, connect: bool, timeout: bool, tls: bool, redirect: bool, attempts: usize },
    /// No credentials could be had.
    Credentials(String),
    /// An answer that breaks the protocol (a listing that is no listing, a missing size).
    Protocol(String),
}

impl Failure {
    /// Whether trying again may pass.
    pub(crate) fn transient(&self) -> bool {
        match self {
            Failure::Status { status, .. } => status.is_server_error() || *status == StatusCode::TOO_MANY_REQUESTS || *status == StatusCode::REQUEST_TIMEOUT,
            Failure::Transport { tls, redirect, .. } => !tls && !redirect,
            Failure::Credentials(_) | Failure::Protocol(_) => false,
        }
    }

    fn attempts(&mut self, n: usize) {
        match self {
            Failure::Status { attempts, .. } | Failure::Transport { attempts, .. } => *attempts = n,
            _ => {}
        }
    }
}

/// What a client's requests share: reqwest's client, the store's addressing and signing, and
/// the limits.
pub(crate) struct Conn {
    pub(crate) http: reqwest::Client,
    pub(crate) s3: Option<S3>,
    /// An HTTP URL's user and password, as a Basic `Authorization` header.
    basic: Option<HeaderValue>,
    /// Texts never shown in an error (keys, secrets, tokens, passwords).
    secrets: Vec<String>,
    pub(crate) retries: usize,
    pub(crate) retry_time: Duration,
    pub(crate) rate: Option<Arc<RateLimit>>,
}

/// A client for one bucket (S3) or origin (HTTP), with the runtime its requests run on (the
/// process's one: see `runtime`).
pub struct Remote {
    pub(crate) rt: &'static tokio::runtime::Runtime,
    pub(crate) conn: Arc<Conn>,
    pub(crate) root: Location,
    pub(crate) opts: RemoteOptions,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote").field("root", &self.root).field("opts", &self.opts).finish_non_exhaustive()
    }
}

/// The process's network runtime, which every [`Remote`] runs its requests on: started by the
/// first, kept for the process's life (its threads idle between transfers). A child forked
/// after it started (a data loader's worker) has none of its threads: it starts its own, and
/// leaves the parent's alone (dropping it there would wait for threads that do not exist).
pub fn runtime() -> std::io::Result<&'static tokio::runtime::Runtime> {
    static RT: std::sync::Mutex<Option<(u32, &'static tokio::runtime::Runtime)>> = std::sync::Mutex::new(None);
    let mut rt = RT.lock().unwrap_or_else(|e| e.into_inner());
    let pid = std::process::id();
    if let Some((p, r)) = *rt {
        if p == pid {
            return Ok(r);
        }
    }
    let threads = std::thread::available_parallelism().map_or(2, usize::from).clamp(1, 4);
    let new = tokio::runtime::Builder::new_multi_thread().worker_threads(threads).thread_name("cacheless-net").enable_all().build()?;
    let new: &'static tokio::runtime::Runtime = Box::leak(Box::new(new));
    *rt = Some((pid, new));
    Ok(new)
}

/// TLS through ring: rustls's provider for this process, installed before the first client is
/// built (reqwest's, and those object_store builds for credentials). A provider the program
/// installed itself stays.
fn tls_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // Err where one is installed already: that one serves.
    ONCE.call_once(|| drop(rustls::crypto::ring::default_provider().install_default()));
}

/// The first of these environment variables that is set and not empty.
fn env_of(names: &[&str]) -> Option<String> {
    names.iter().find_map(|n| std::env::var(n).ok().filter(|v| !v.is_empty()))
}

impl Remote {
    /// A client for `loc`'s bucket or origin. S3 reads the usual AWS environment where
    /// `opts` leaves a setting unset: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
    /// `AWS_SESSION_TOKEN`, `AWS_REGION` (or `AWS_DEFAULT_REGION`; us-east-1 when unset),
    /// `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL` (a custom endpoint, addressed path-style;
    /// `http://` allowed), `AWS_CA_BUNDLE`, and the web-identity and container credential
    /// variables. Sends no request.
    pub fn connect(loc: &Location, opts: &RemoteOptions) -> Result<Remote> {
        let fail = |what: String| Error::new(ErrorKind::InvalidInput, "connect", loc.to_string(), what);
        tls_provider();
        let mut secrets = Vec::new();
        let mut b = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .read_timeout(opts.stall)
            .pool_max_idle_per_host(opts.concurrency.max(1) * 2)
            .redirect(reqwest::redirect::Policy::limited(10));
        let (s3, basic) = match loc.scheme() {
            Scheme::S3 => {
                let region = opts.region.clone().or_else(|| env_of(&["AWS_REGION", "AWS_DEFAULT_REGION"])).unwrap_or_else(|| "us-east-1".into());
                let endpoint = opts.endpoint.clone().or_else(|| env_of(&["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"]));
                if let Some(e) = &endpoint {
                    let ok = url::Url::parse(e).is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some());
                    if !ok {
                        return Err(fail(format!("the endpoint {e} is not an http:// or https:// URL")));
                    }
                }
                let bundle = opts.ca_bundle.clone().or_else(|| env_of(&["AWS_CA_BUNDLE"]).map(PathBuf::from));
                if let Some(path) = bundle {
                    let pem = std::fs::read(&path)
                        .map_err(|e| Error::io("read the CA bundle", &path, e).with_note("the CA bundle is --ca-bundle or AWS_CA_BUNDLE"))?;
                    let certs = reqwest::Certificate::from_pem_bundle(&pem)
                        .map_err(|e| Error::new(ErrorKind::InvalidInput, "read the CA bundle", &path, format!("not PEM certificates: {e}")))?;
                    for c in certs {
                        b = b.add_root_certificate(c);
                    }
                }
                let chain = (!opts.no_sign_request).then(|| {
                    let mut c = object_store::aws::AmazonS3Builder::from_env().with_bucket_name(loc.root()).with_region(&region);
                    if let Some(k) = &opts.credentials {
                        c = c.with_access_key_id(&k.key_id).with_secret_access_key(&k.secret);
                        if let Some(t) = &k.token {
                            c = c.with_token(t);
                        }
                    }
                    c
                });
                if let Some(k) = &opts.credentials {
                    secrets.extend([k.key_id.clone(), k.secret.clone()].into_iter().chain(k.token.clone()));
                }
                secrets.extend(["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"].iter().filter_map(|n| env_of(&[n])));
                (Some(S3::new(loc.root(), &region, endpoint.as_deref(), chain).map_err(fail)?), None)
            }
            Scheme::Http => {
                let basic = loc.user().map(|(u, p)| {
                    use base64::Engine as _;
                    secrets.push(p.clone());
                    let token = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
                    secrets.push(token.clone());
                    let mut v = HeaderValue::from_str(&format!("Basic {token}")).unwrap_or(HeaderValue::from_static(""));
                    v.set_sensitive(true);
                    v
                });
                (None, basic)
            }
        };
        secrets.retain(|s| s.len() >= 4);
        let http = b.build().map_err(|e| fail(chain(&e)))?;
        let rt = runtime().map_err(|e| Error::io("start the network runtime", loc.to_string(), e))?;
        let conn = Conn { http, s3, basic, secrets, retries: opts.retries, retry_time: opts.retry_time, rate: opts.rate.clone() };
        Ok(Remote { rt, conn: Arc::new(conn), root: loc.with_key(""), opts: opts.clone() })
    }

    /// The options transfers use.
    pub fn options(&self) -> &RemoteOptions {
        &self.opts
    }

    /// Whether this client serves `loc`.
    pub fn serves(&self, loc: &Location) -> bool {
        self.root.same_store(loc)
    }

    /// The object's size and identity (a HEAD request; a ranged GET of its first byte where a
    /// web server answers no HEAD).
    pub fn head(&self, loc: &Location) -> Result<ObjectInfo> {
        self.rt.block_on(self.conn.head(loc)).map_err(|f| self.conn.error("stat", loc, f))
    }

    /// Every object under the prefix `loc` (S3), in key order, keys exactly as stored (folder
    /// markers and keys no local name can hold among them: a copy skips those).
    pub fn list(&self, loc: &Location) -> Result<Vec<ObjectInfo>> {
        if loc.scheme() != Scheme::S3 {
            return Err(Error::new(ErrorKind::Unsupported, "list", loc.to_string(), "an HTTP server has no listing: name each file's URL"));
        }
        let mut out = self.rt.block_on(self.conn.list(loc, self.opts.list_page)).map_err(|f| self.conn.error("list", loc, f))?;
        out.sort_by(|a, b| a.location.key().cmp(b.location.key()));
        Ok(out)
    }

    /// Whether the server answers a ranged GET of the object with its range (206): an S3 store
    /// always does; a web server may not. An empty object has no range to ask for (true).
    pub fn ranges(&self, info: &ObjectInfo) -> Result<bool> {
        if info.size == 0 {
            return Ok(true);
        }
        let got = self.rt.block_on(self.conn.get(&info.location, Some(0..1), info.etag.as_deref()));
        match got {
            Ok(r) => Ok(r.status() == StatusCode::PARTIAL_CONTENT),
            Err(f) => Err(self.conn.error("read", &info.location, f)),
        }
    }
}

/// An error unless `loc` can be uploaded to: an object's key (`InvalidInput` for a prefix, or a
/// key no request can name exactly), on S3 (`Unsupported` for a web server, which takes none
/// here).
pub fn check_writable(loc: &Location) -> Result<()> {
    if loc.is_prefix() {
        return Err(Error::new(ErrorKind::InvalidInput, "upload", loc.to_string(), "an upload needs an object's key, not a prefix (a URL ending in /)"));
    }
    match loc.scheme() {
        Scheme::S3 if !s3::sendable(loc.key()) => Err(Error::new(
            ErrorKind::InvalidInput,
            "upload",
            loc.to_string(),
            "a key with a . or .. part cannot be sent as it is written (HTTP resolves such parts): choose another key",
        )),
        Scheme::S3 => Ok(()),
        Scheme::Http => Err(Error::new(ErrorKind::Unsupported, "upload", loc.to_string(), "uploads go to s3:// URLs; a web server takes none")),
    }
}

/// A response header as text.
pub(crate) fn header(h: &HeaderMap, name: reqwest::header::HeaderName) -> Option<&str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// `Content-Range: bytes A-B/TOTAL`: (A, B inclusive, TOTAL if stated).
pub(crate) fn content_range(h: &HeaderMap) -> Option<(u64, u64, Option<u64>)> {
    let v = header(h, CONTENT_RANGE)?.trim().strip_prefix("bytes ")?;
    let (span, total) = v.split_once('/')?;
    let (a, b) = span.split_once('-')?;
    Some((a.trim().parse().ok()?, b.trim().parse().ok()?, total.trim().parse().ok()))
}

/// The wait before retry `attempt` (from 1): 100 ms, doubling, at most 5 s.
pub(crate) fn backoff(attempt: usize) -> Duration {
    Duration::from_millis((100u64 << attempt.saturating_sub(1).min(6)).min(5000))
}

impl Conn {
    /// One request: signed (S3) or with the URL's Basic credentials (HTTP), sent; an error
    /// status read into a [`Failure`] (the error document's code and message only).
    pub(crate) async fn send_once(
        &self,
        method: Method,
        url: &str,
        headers: HeaderMap,
        body: Option<Bytes>,
    ) -> std::result::Result<reqwest::Response, Failure> {
        let mut rb = self.http.request(method, url).headers(headers);
        if let Some(b) = body {
            rb = rb.header(CONTENT_LENGTH, b.len()).body(self.body(b));
        }
        let mut req = rb.build().map_err(|e| self.transport(e))?;
        if let Some(s3) = &self.s3 {
            if let Some(cred) = s3.credential().await.map_err(Failure::Credentials)? {
                s3.sign(&mut req, &cred).map_err(Failure::Credentials)?;
            }
        } else if let Some(b) = &self.basic {
            req.headers_mut().insert(AUTHORIZATION, b.clone());
        }
        let resp = self.http.execute(req).await.map_err(|e| self.transport(e))?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        Err(self.status(resp).await)
    }

    /// [`Conn::send_once`], tried again while it fails in a way that may pass, within the
    /// retry count and time.
    pub(crate) async fn send(&self, method: Method, url: &str, headers: HeaderMap, body: Option<Bytes>) -> std::result::Result<reqwest::Response, Failure> {
        let start = Instant::now();
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.send_once(method.clone(), url, headers.clone(), body.clone()).await {
                Ok(r) => return Ok(r),
                Err(mut f) => {
                    if !f.transient() || attempt > self.retries || start.elapsed() + backoff(attempt) > self.retry_time {
                        f.attempts(attempt);
                        return Err(f);
                    }
                    tokio::time::sleep(backoff(attempt)).await;
                }
            }
        }
    }

    /// A request body: the bytes as they are, or, under a rate limit, in slices of 256 KiB
    /// each sent when the limit allows.
    fn body(&self, b: Bytes) -> reqwest::Body {
        let Some(rate) = self.rate.clone() else { return reqwest::Body::from(b) };
        const SLICE: usize = 256 << 10;
        let slices = futures::stream::unfold((b, rate), |(rest, rate)| async move {
            if rest.is_empty() {
                return None;
            }
            let n = rest.len().min(SLICE);
            tokio::time::sleep(rate.reserve(n as u64)).await;
            let head = rest.slice(..n);
            Some((Ok::<Bytes, std::io::Error>(head), (rest.slice(n..), rate)))
        });
        reqwest::Body::wrap_stream(slices)
    }

    /// A transport failure, its words without the URL (which may hold a signed query).
    pub(crate) fn transport(&self, e: reqwest::Error) -> Failure {
        let (connect, timeout, redirect) = (e.is_connect(), e.is_timeout(), e.is_redirect());
        let text = chain(&e.without_url());
        let tls = text.contains("certificate") || text.contains("InvalidCertificate") || text.contains("UnknownIssuer") || text.contains("tls handshake");
        Failure::Transport { what: self.redact(&text), connect, timeout, tls, redirect, attempts: 1 }
    }

    /// An error status: the S3 error document's code and message where the body is one (read
    /// up to 64 KiB), nothing else of it.
    async fn status(&self, resp: reqwest::Response) -> Failure {
        let status = resp.status();
        let mut body = Vec::new();
        let mut resp = resp;
        let read = async {
            while let Ok(Some(c)) = resp.chunk().await {
                body.extend_from_slice(&c);
                if body.len() > 64 << 10 {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(5), read).await;
        let doc = s3::error_doc(&String::from_utf8_lossy(&body));
        let clean = |s: Option<String>| s.map(|t| self.redact(&printable(&t, 200))).filter(|t| !t.is_empty());
        let (code, message) = match doc {
            Some(d) => (clean(d.code), clean(d.message)),
            None => (None, None),
        };
        Failure::Status { status, code, message, attempts: 1 }
    }

    /// `text` with every secret this client knows replaced by `***`, and any SigV4 signature.
    fn redact(&self, text: &str) -> String {
        let mut t = text.to_string();
        for s in &self.secrets {
            t = t.replace(s.as_str(), "***");
        }
        for marker in ["Signature=", "X-Amz-Signature=", "Credential="] {
            let mut from = 0;
            while let Some(i) = t[from..].find(marker) {
                let start = from + i + marker.len();
                let end = t[start..].find(|c: char| !(c.is_ascii_alphanumeric() || "/-_%".contains(c))).map_or(t.len(), |j| start + j);
                t.replace_range(start..end, "***");
                from = start + 3;
            }
        }
        t
    }

    /// The object's URL (S3: the endpoint's; HTTP: the URL's own, with its query).
    pub(crate) fn url(&self, loc: &Location) -> String {
        match &self.s3 {
            Some(s3) => s3.object_url(loc.key()),
            None => loc.request_url(),
        }
    }

    /// A GET of the object (`range`: those bytes), pinned to `etag`.
    pub(crate) async fn get(&self, loc: &Location, range: Option<std::ops::Range<u64>>, etag: Option<&str>) -> std::result::Result<reqwest::Response, Failure> {
        if loc.scheme() == Scheme::S3 && !s3::sendable(loc.key()) {
            return Err(Failure::Protocol("a key with a . or .. part cannot be asked for as it is written (HTTP resolves such parts)".into()));
        }
        let mut h = HeaderMap::new();
        if let Some(r) = range {
            h.insert(RANGE, HeaderValue::from_str(&format!("bytes={}-{}", r.start, r.end.saturating_sub(1))).map_err(|e| Failure::Protocol(e.to_string()))?);
        }
        if let Some(e) = etag.and_then(|e| HeaderValue::from_str(e).ok()) {
            h.insert(IF_MATCH, e);
        }
        self.send_once(Method::GET, &self.url(loc), h, None).await
    }

    /// The object's size, ETag and time.
    async fn head(&self, loc: &Location) -> std::result::Result<ObjectInfo, Failure> {
        if loc.scheme() == Scheme::S3 && !s3::sendable(loc.key()) {
            return Err(Failure::Protocol("a key with a . or .. part cannot be asked for as it is written (HTTP resolves such parts)".into()));
        }
        let url = self.url(loc);
        let (h, size) = match self.send(Method::HEAD, &url, HeaderMap::new(), None).await {
            Ok(r) => {
                let size = header(r.headers(), CONTENT_LENGTH).and_then(|v| v.trim().parse::<u64>().ok());
                (r.headers().clone(), size)
            }
            // A web server that answers no HEAD: the first byte, whose Content-Range says the size.
            Err(Failure::Status { status, .. }) if loc.scheme() == Scheme::Http && matches!(status.as_u16(), 405 | 501) => {
                let mut rh = HeaderMap::new();
                rh.insert(RANGE, HeaderValue::from_static("bytes=0-0"));
                let r = self.send(Method::GET, &url, rh, None).await?;
                let size = match r.status() {
                    StatusCode::PARTIAL_CONTENT => content_range(r.headers()).and_then(|c| c.2),
                    _ => header(r.headers(), CONTENT_LENGTH).and_then(|v| v.trim().parse::<u64>().ok()),
                };
                (r.headers().clone(), size)
            }
            Err(f) => return Err(f),
        };
        let Some(size) = size else { return Err(Failure::Protocol("the server does not say the object's size (no Content-Length)".into())) };
        Ok(ObjectInfo {
            location: loc.clone(),
            size,
            etag: header(&h, ETAG).map(str::to_string),
            last_modified: header(&h, LAST_MODIFIED).and_then(s3::http_time).unwrap_or(SystemTime::UNIX_EPOCH),
            version: header(&h, reqwest::header::HeaderName::from_static("x-amz-version-id")).map(str::to_string),
        })
    }

    /// Every object under `loc`'s prefix: ListObjectsV2, page after page.
    async fn list(&self, loc: &Location, page: usize) -> std::result::Result<Vec<ObjectInfo>, Failure> {
        let Some(s3) = &self.s3 else { return Err(Failure::Protocol("no listing over HTTP".into())) };
        let prefix = loc.key();
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut q = format!("list-type=2&encoding-type=url&max-keys={}&prefix={}", page.clamp(1, 1000), s3::uri_encode(prefix, false));
            if let Some(t) = &token {
                q.push_str(&format!("&continuation-token={}", s3::uri_encode(t, false)));
            }
            let url = format!("{}?{q}", s3.bucket_url());
            let body = self.send(Method::GET, &url, HeaderMap::new(), None).await?.text().await.map_err(|e| self.transport(e))?;
            let (objs, next) = s3::list_page(&body).map_err(Failure::Protocol)?;
            out.extend(objs.into_iter().map(|o| ObjectInfo {
                location: loc.with_key(o.key),
                size: o.size,
                etag: o.etag,
                last_modified: o.last_modified,
                version: None,
            }));
            match next {
                Some(t) => token = Some(t),
                None => return Ok(out),
            }
        }
    }

    /// One PUT of the whole object; its ETag.
    pub(crate) async fn put(&self, loc: &Location, body: Bytes) -> std::result::Result<Option<String>, Failure> {
        let r = self.send(Method::PUT, &self.url(loc), HeaderMap::new(), Some(body)).await?;
        Ok(header(r.headers(), ETAG).map(str::to_string))
    }

    /// Starts a multipart upload; its id.
    pub(crate) async fn create_multipart(&self, loc: &Location) -> std::result::Result<String, Failure> {
        let url = format!("{}?uploads", self.url(loc));
        let body = self.send(Method::POST, &url, HeaderMap::new(), None).await?.text().await.map_err(|e| self.transport(e))?;
        s3::upload_id(&body).map_err(Failure::Protocol)
    }

    /// Sends part `n`; its ETag.
    pub(crate) async fn put_part(&self, loc: &Location, id: &str, n: u64, body: Bytes) -> std::result::Result<String, Failure> {
        let url = format!("{}?partNumber={n}&uploadId={}", self.url(loc), s3::uri_encode(id, false));
        let r = self.send(Method::PUT, &url, HeaderMap::new(), Some(body)).await?;
        header(r.headers(), ETAG).map(str::to_string).ok_or_else(|| Failure::Protocol(format!("the server gave no ETag for part {n}")))
    }

    /// Completes a multipart upload of `parts` (number, ETag; in order); the object's ETag.
    pub(crate) async fn complete(&self, loc: &Location, id: &str, parts: &[(u64, String)]) -> std::result::Result<Option<String>, Failure> {
        let url = format!("{}?uploadId={}", self.url(loc), s3::uri_encode(id, false));
        let r = self.send(Method::POST, &url, HeaderMap::new(), Some(Bytes::from(s3::complete_body(parts)))).await?;
        let etag = header(r.headers(), ETAG).map(str::to_string);
        let text = r.text().await.map_err(|e| self.transport(e))?;
        // S3 may answer 200 and send an error as the body.
        match s3::completed(&text) {
            Ok(e) => Ok(e.or(etag)),
            Err(d) => Err(Failure::Status {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                code: d.code,
                message: d.message.map(|m| self.redact(&printable(&m, 200))),
                attempts: 1,
            }),
        }
    }

    /// Aborts a multipart upload: the server drops its parts.
    pub(crate) async fn abort(&self, loc: &Location, id: &str) -> std::result::Result<(), Failure> {
        let url = format!("{}?uploadId={}", self.url(loc), s3::uri_encode(id, false));
        self.send(Method::DELETE, &url, HeaderMap::new(), None).await.map(|_| ())
    }

    /// The engine's error for a failed request on `loc`: its kind, what the server said (its
    /// code and message, never its whole answer nor a credential), and what to try.
    pub(crate) fn error(&self, op: &'static str, loc: &Location, f: Failure) -> Error {
        let s3 = loc.scheme() == Scheme::S3;
        let tries = |n: usize| if n > 1 { format!(" (all {n} attempts)") } else { String::new() };
        match f {
            Failure::Status { status, code, message, attempts } => {
                let said = match (&code, &message) {
                    (Some(c), Some(m)) => format!("{c}: {m}"),
                    (Some(c), None) => c.clone(),
                    (None, Some(m)) => m.clone(),
                    (None, None) => String::new(),
                };
                let what = format!(
                    "HTTP {}{}{}",
                    status.as_u16(),
                    status.canonical_reason().map(|r| format!(" {r}")).unwrap_or_default(),
                    if said.is_empty() { String::new() } else { format!(", {said}") }
                );
                let (kind, head, note): (ErrorKind, &str, String) = match status.as_u16() {
                    404 => (ErrorKind::NotFound, "no such object", if s3 { "check the bucket and key (a prefix ends in /; `cacheless info URL` says what the server has)".into() } else { "check the URL".into() }),
                    403 if s3 => (ErrorKind::PermissionDenied, "access denied", "check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN (and AWS_REGION, AWS_ENDPOINT_URL); a public bucket takes --no-sign-request".into()),
                    403 => (ErrorKind::PermissionDenied, "access denied", "the server refuses this URL".into()),
                    401 if s3 => (ErrorKind::PermissionDenied, "not authenticated", "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY".into()),
                    401 if loc.user().is_some() => (ErrorKind::PermissionDenied, "not authenticated", "the server refused the user and password given in the URL".into()),
                    401 => (ErrorKind::PermissionDenied, "not authenticated", "the server asks for credentials: give them in the URL (https://USER:PASSWORD@HOST/...)".into()),
                    412 => (ErrorKind::Changed, "the object was replaced during the transfer (its ETag changed)", "run it again to fetch the new version; nothing of the old one was kept".into()),
                    416 => (ErrorKind::Io, "the server has none of the bytes asked for", "the object is shorter than the server said it was: run it again".into()),
                    _ => (ErrorKind::Io, "the server failed the request", String::new()),
                };
                let err = Error::new(kind, op, loc.to_string(), format!("{head} ({what}){}", tries(attempts)));
                if note.is_empty() {
                    err
                } else {
                    err.with_note(note)
                }
            }
            Failure::Transport { what, connect, timeout, tls, attempts, .. } => {
                if tls {
                    let note = if s3 {
                        "trust its CA with --ca-bundle or AWS_CA_BUNDLE, or SSL_CERT_FILE / SSL_CERT_DIR"
                    } else {
                        "trust its CA with SSL_CERT_FILE or SSL_CERT_DIR"
                    };
                    return Error::new(ErrorKind::Io, op, loc.to_string(), format!("TLS: the server's certificate is not trusted: {what}")).with_note(note);
                }
                if connect {
                    let note = if s3 { "is it up? The endpoint is --endpoint-url or AWS_ENDPOINT_URL" } else { "is it up? Check the URL's host and port" };
                    return Error::new(ErrorKind::Io, op, loc.to_string(), format!("cannot reach the server: {what}{}", tries(attempts))).with_note(note);
                }
                if timeout {
                    return Error::new(ErrorKind::Io, op, loc.to_string(), format!("the server stopped answering: {what}{}", tries(attempts)))
                        .with_note("a stall is cut after --read-timeout and retried --retries times");
                }
                Error::new(ErrorKind::Io, op, loc.to_string(), format!("{what}{}", tries(attempts)))
            }
            Failure::Credentials(what) => Error::new(ErrorKind::PermissionDenied, op, loc.to_string(), format!("no credentials: {}", self.redact(&what)))
                .with_note("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or a role); a public bucket takes --no-sign-request"),
            Failure::Protocol(what) => Error::new(ErrorKind::Io, op, loc.to_string(), self.redact(&what)),
        }
    }
}

/// `s` with control characters dropped, at most `max` characters (an error's words, as they
/// may be shown on a terminal).
fn printable(s: &str, max: usize) -> String {
    s.chars().filter(|c| !c.is_control()).take(max).collect::<String>().trim().to_string()
}

/// A multipart upload not yet completed: its parts are sent as they come (numbered in order),
/// and it is aborted when dropped uncompleted, so that an error, Ctrl-C or SIGTERM leaves no
/// parts on the server.
pub(crate) struct Multipart {
    conn: Arc<Conn>,
    rt: tokio::runtime::Handle,
    loc: Location,
    id: Option<String>,
    parts: Arc<std::sync::Mutex<Vec<(u64, String)>>>,
    next: u64,
}

impl Multipart {
    /// Starts a multipart upload to `loc`.
    pub(crate) fn start(remote: &Remote, loc: &Location) -> Result<Multipart> {
        let id = remote.rt.block_on(remote.conn.create_multipart(loc)).map_err(|f| remote.conn.error("upload", loc, f))?;
        Ok(Multipart { conn: remote.conn.clone(), rt: remote.rt.handle().clone(), loc: loc.clone(), id: Some(id), parts: Arc::default(), next: 0 })
    }

    /// The next part's request, to run on the runtime: its ETag is kept for the completion.
    pub(crate) fn part(&mut self, body: Bytes) -> impl std::future::Future<Output = std::result::Result<(), Failure>> + Send + 'static {
        self.next += 1;
        let (n, conn, loc, id, parts) = (self.next, self.conn.clone(), self.loc.clone(), self.id.clone().unwrap_or_default(), self.parts.clone());
        async move {
            let etag = conn.put_part(&loc, &id, n, body).await?;
            parts.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((n, etag));
            Ok(())
        }
    }

    /// Parts sent so far.
    pub(crate) fn count(&self) -> u64 {
        self.next
    }

    /// Completes the upload once every part is in (the object appears); its ETag. Aborted if
    /// that fails.
    pub(crate) fn complete(mut self) -> Result<Option<String>> {
        let Some(id) = self.id.take() else {
            return Err(Error::new(ErrorKind::Io, "upload", self.loc.to_string(), "the upload was closed already"));
        };
        let mut parts = std::mem::take(&mut *self.parts.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        parts.sort_by_key(|p| p.0);
        if parts.len() as u64 != self.next {
            let _ = self.rt.block_on(self.conn.abort(&self.loc, &id));
            let m = format!("{} of {} parts were sent", parts.len(), self.next);
            return Err(Error::new(ErrorKind::Io, "upload", self.loc.to_string(), m).with_note("the upload was aborted"));
        }
        match self.rt.block_on(self.conn.complete(&self.loc, &id, &parts)) {
            Ok(etag) => Ok(etag),
            Err(f) => {
                let _ = self.rt.block_on(self.conn.abort(&self.loc, &id));
                Err(self.conn.error("upload", &self.loc, f).with_note("completing the upload failed; it was aborted"))
            }
        }
    }

    /// Aborts the upload now.
    pub(crate) fn abort(&mut self) {
        if let Some(id) = self.id.take() {
            let _ = self.rt.block_on(self.conn.abort(&self.loc, &id));
        }
    }
}

impl Drop for Multipart {
    fn drop(&mut self) {
        self.abort();
    }
}
