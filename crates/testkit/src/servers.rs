//! The S3 and HTTP servers the test command starts (`scripts/test-servers`), found through the
//! addresses it exports. A test that needs one and finds none says why, or fails when
//! `CACHELESS_REQUIRE` names `s3` or `http`.

use std::path::PathBuf;

/// The S3 server (SeaweedFS's `weed mini`) and its one bucket and identity.
#[derive(Debug, Clone)]
pub struct S3 {
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// The bucket the tests write in (each test under a prefix of its own).
    pub bucket: String,
    /// The access key it accepts.
    pub key: String,
    /// Its secret.
    pub secret: String,
    /// The filer's HTTP API (lists the parts of unfinished multipart uploads).
    pub filer: String,
}

impl S3 {
    /// The AWS environment that points a client at this server.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_ACCESS_KEY_ID", self.key.clone()),
            ("AWS_SECRET_ACCESS_KEY", self.secret.clone()),
            ("AWS_REGION", "us-east-1".into()),
        ]
    }

    /// `s3://BUCKET/KEY`.
    pub fn url(&self, key: &str) -> String {
        format!("s3://{}/{key}", self.bucket)
    }

    /// The multipart uploads not completed nor aborted under `prefix` (keys), as the server
    /// keeps them: folders under `/buckets/BUCKET/.uploads/` on its filer.
    pub fn open_uploads(&self, prefix: &str) -> Vec<String> {
        let url = format!("{}/buckets/{}/.uploads/?limit=100000", self.filer, self.bucket);
        let out = std::process::Command::new("python3").args(["-c", LIST_UPLOADS, &url, prefix]).output().unwrap_or_else(|e| panic!("python3: {e}"));
        assert!(out.status.success(), "listing {url}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
    }
}

/// Prints the key of each upload folder in the filer's listing (JSON) whose key starts with
/// argv[2] (the key is the folder's `key` attribute, base64); a missing folder is no uploads.
const LIST_UPLOADS: &str = r#"
import base64, json, sys, urllib.error, urllib.request
req = urllib.request.Request(sys.argv[1], headers={"Accept": "application/json"})
try:
    entries = json.load(urllib.request.urlopen(req, timeout=10)).get("Entries") or []
except urllib.error.HTTPError as e:
    if e.code == 404:
        entries = []
    else:
        raise
for e in entries:
    key = base64.b64decode((e.get("Extended") or {}).get("key", "")).decode()
    if key.startswith(sys.argv[2]):
        print(key)
"#;

/// The HTTP server (nginx) and the folder it serves.
#[derive(Debug, Clone)]
pub struct Http {
    /// `http://127.0.0.1:PORT`.
    pub origin: String,
    /// The folder served: files under `ranges/` are served with byte ranges, under `noranges/`
    /// without.
    pub root: PathBuf,
}

fn var(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("{name} is not set (scripts/test starts the servers: scripts/test-servers)"))
}

/// The S3 server, or `None` (said, or failing under `CACHELESS_REQUIRE=s3`).
#[track_caller]
pub fn s3() -> Option<S3> {
    let found = (|| {
        Ok(S3 {
            endpoint: var("CACHELESS_TEST_S3")?,
            bucket: var("CACHELESS_TEST_S3_BUCKET")?,
            key: var("CACHELESS_TEST_S3_KEY")?,
            secret: var("CACHELESS_TEST_S3_SECRET")?,
            filer: var("CACHELESS_TEST_S3_FILER")?,
        })
    })();
    match found {
        Ok(s) => Some(s),
        Err(why) => {
            crate::require("s3", Err(why));
            None
        }
    }
}

/// The HTTP server, or `None` (said, or failing under `CACHELESS_REQUIRE=http`).
#[track_caller]
pub fn http() -> Option<Http> {
    let found = (|| Ok(Http { origin: var("CACHELESS_TEST_HTTP")?, root: PathBuf::from(var("CACHELESS_TEST_HTTP_ROOT")?) }))();
    match found {
        Ok(h) => Some(h),
        Err(why) => {
            crate::require("http", Err(why));
            None
        }
    }
}
