//! The S3 and HTTP servers the test command starts (`scripts/test-servers`), found through the
//! addresses it exports, and the peers whose results the tests hold ours to (the AWS CLI,
//! rclone, curl). A test that needs one and finds none says why, or fails when
//! `CACHELESS_REQUIRE` names it (`s3`, `moto`, `http`, `tls`, `aws`, `rclone`).

use std::path::PathBuf;
use std::process::Command;

/// Which S3 implementation a server is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Impl {
    /// SeaweedFS's `weed mini`: checks signatures against its one identity.
    Seaweed,
    /// moto's server: takes any keys; other ETags, multipart rules and listing pages.
    Moto,
}

/// An S3 server and its one bucket and identity.
#[derive(Debug, Clone)]
pub struct S3 {
    /// Which implementation.
    pub kind: Impl,
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
    /// keeps them: folders under `/buckets/BUCKET/.uploads/` on SeaweedFS's filer; moto's
    /// ListMultipartUploads (it checks no signature).
    pub fn open_uploads(&self, prefix: &str) -> Vec<String> {
        let (script, url) = match self.kind {
            Impl::Seaweed => (LIST_UPLOADS, format!("{}/buckets/{}/.uploads/?limit=100000", self.filer, self.bucket)),
            Impl::Moto => (LIST_MOTO_UPLOADS, format!("{}/{}?uploads", self.endpoint, self.bucket)),
        };
        let out = Command::new("python3").args(["-c", script, &url, prefix]).output().unwrap_or_else(|e| panic!("python3: {e}"));
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

/// Prints the key of each upload in a ListMultipartUploads answer whose key starts with argv[2].
const LIST_MOTO_UPLOADS: &str = r#"
import sys, urllib.request, xml.etree.ElementTree as ET
doc = ET.fromstring(urllib.request.urlopen(sys.argv[1], timeout=10).read())
for u in doc.iter():
    if u.tag.endswith("Upload"):
        key = next((c.text for c in u if c.tag.endswith("Key")), "")
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
            kind: Impl::Seaweed,
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

/// The second S3 server (moto), or `None` (said, or failing under `CACHELESS_REQUIRE=moto`).
#[track_caller]
pub fn moto() -> Option<S3> {
    let found = (|| {
        Ok(S3 {
            kind: Impl::Moto,
            endpoint: var("CACHELESS_TEST_MOTO")?,
            bucket: var("CACHELESS_TEST_S3_BUCKET")?,
            key: "cachelessmoto".into(),
            secret: "cachelessmotosecret".into(),
            filer: String::new(),
        })
    })();
    match found {
        Ok(s) => Some(s),
        Err(why) => {
            crate::require("moto", Err(why));
            None
        }
    }
}

/// Every S3 server there is (each missing one said, or failing when required).
#[track_caller]
pub fn all_s3() -> Vec<S3> {
    s3().into_iter().chain(moto()).collect()
}

/// The misbehaving web server (scripts/misbehaving-http), over the files of nginx's `ranges/`.
#[derive(Debug, Clone)]
pub struct BadHttp {
    /// `http://127.0.0.1:PORT`: `/MODE/NAME` serves `ranges/NAME` as MODE says.
    pub origin: String,
    /// The folder its names are in.
    pub root: PathBuf,
}

impl BadHttp {
    /// The URL of `name` served as `mode` does.
    pub fn url(&self, mode: &str, name: &str) -> String {
        format!("{}/{mode}/{name}", self.origin)
    }
}

/// The misbehaving server, or `None` (said, or failing under `CACHELESS_REQUIRE=http`).
#[track_caller]
pub fn bad_http() -> Option<BadHttp> {
    let found = (|| Ok(BadHttp { origin: var("CACHELESS_TEST_BAD_HTTP")?, root: PathBuf::from(var("CACHELESS_TEST_HTTP_ROOT")?).join("ranges") }))();
    match found {
        Ok(h) => Some(h),
        Err(why) => {
            crate::require("http", Err(why));
            None
        }
    }
}

/// The servers behind TLS, with a certificate signed by a CA of the tests' own that nothing
/// else trusts.
#[derive(Debug, Clone)]
pub struct Tls {
    /// The misbehaving server over HTTPS (`/ok/NAME` and the other modes).
    pub http: BadHttp,
    /// moto behind a TLS front: an S3 endpoint over HTTPS.
    pub moto: String,
    /// The CA's certificate (PEM).
    pub ca: PathBuf,
}

/// The TLS servers, or `None` (said, or failing under `CACHELESS_REQUIRE=tls`).
#[track_caller]
pub fn tls() -> Option<Tls> {
    let found = (|| {
        Ok(Tls {
            http: BadHttp { origin: var("CACHELESS_TEST_BAD_HTTPS")?, root: PathBuf::from(var("CACHELESS_TEST_HTTP_ROOT")?).join("ranges") },
            moto: var("CACHELESS_TEST_MOTO_TLS")?,
            ca: PathBuf::from(var("CACHELESS_TEST_TLS_CA")?),
        })
    })();
    match found {
        Ok(t) => Some(t),
        Err(why) => {
            crate::require("tls", Err(why));
            None
        }
    }
}

/// The AWS CLI (PyPI's awscli, `CACHELESS_TEST_AWS`), pointed at `s3` with its keys, or `None`
/// (said, or failing under `CACHELESS_REQUIRE=aws`).
#[track_caller]
pub fn aws(s3: &S3) -> Option<Command> {
    let found = var("CACHELESS_TEST_AWS").and_then(|p| if std::path::Path::new(&p).exists() { Ok(p) } else { Err(format!("{p} is not there")) });
    match found {
        Ok(p) => {
            let mut c = Command::new(p);
            c.envs(s3.env()).env("AWS_MAX_ATTEMPTS", "2").env_remove("AWS_CA_BUNDLE").args(["--endpoint-url", &s3.endpoint]);
            Some(c)
        }
        Err(why) => {
            crate::require("aws", Err(why));
            None
        }
    }
}

/// rclone (Debian's), with a remote named `s3` that reaches `s3` (path style, its keys), or
/// `None` (said, or failing under `CACHELESS_REQUIRE=rclone`).
#[track_caller]
pub fn rclone(s3: &S3) -> Option<Command> {
    let found = which("rclone");
    match found {
        Ok(p) => {
            let mut c = Command::new(p);
            c.env_remove("AWS_CA_BUNDLE")
                .env("RCLONE_CONFIG", "/dev/null")
                .env("RCLONE_CONFIG_S3_TYPE", "s3")
                .env("RCLONE_CONFIG_S3_PROVIDER", "Other")
                .env("RCLONE_CONFIG_S3_ENDPOINT", &s3.endpoint)
                .env("RCLONE_CONFIG_S3_ACCESS_KEY_ID", &s3.key)
                .env("RCLONE_CONFIG_S3_SECRET_ACCESS_KEY", &s3.secret)
                .env("RCLONE_CONFIG_S3_REGION", "us-east-1")
                .env("RCLONE_CONFIG_S3_FORCE_PATH_STYLE", "true");
            Some(c)
        }
        Err(why) => {
            crate::require("rclone", Err(why));
            None
        }
    }
}

/// The path of the program `name` on `PATH`.
pub fn which(name: &str) -> Result<PathBuf, String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file()).ok_or_else(|| format!("{name} is not on PATH"))
}
